"""A short-lived cache of channel configurations for the HTTP ingest path (and for
:func:`awooop.producer.submit` with a Database).

The configuration read (:func:`awooop.ingest.ingest_write.load_config`: secret, token hash, dedupe
TTL, the contract's max_attempts) is one of the two round trips of a delivery, and it
changes rarely. A delivery whose credential checks out against a cached entry younger than
AWOOOP_INGEST_CONFIG_CACHE_S skips it. Only entries that authenticated a request are kept,
and a request that fails against a cached entry is checked once more against the database,
so a new secret or token works at once. What may lag by up to the cache age: a revoked
token or a replaced secret still being accepted, a changed dedupe TTL or contract
max_attempts not yet applied. Set the variable to 0 to read the database on every delivery.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from awooop.ingest.ingest_write import ChannelConfig

CacheKey = tuple[str, str, str, str | None]  # project, channel, contract, token id
MAX_ENTRIES = 4096


class ConfigCache:
    def __init__(
        self, ttl_s: float, clock: Callable[[], float] = time.monotonic, size: int = MAX_ENTRIES
    ) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.size = size
        self._entries: OrderedDict[CacheKey, tuple[float, ChannelConfig]] = OrderedDict()

    def get(self, key: CacheKey) -> ChannelConfig | None:
        if self.ttl_s <= 0:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        stored_at, config = entry
        if self.clock() - stored_at >= self.ttl_s:
            del self._entries[key]
            return None
        return config

    def put(self, key: CacheKey, config: ChannelConfig) -> None:
        if self.ttl_s <= 0:
            return
        self._entries[key] = (self.clock(), config)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def drop(self, key: CacheKey) -> None:
        self._entries.pop(key, None)
