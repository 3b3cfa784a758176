"""A consumer's groups, and the shard epochs it has seen (losing Redis, R-33).

Each shard has an epoch key the relay writes after (re)creating the shard's groups and
republishing from Postgres. The consumer remembers the epoch it saw:
- NOGROUP (the group or the stream is gone): the group is created again, atomically with an
  epoch read, at 0 unless the epoch is unchanged and the consumer remembers its last id (the
  stream survived; then at that id). Never at ``$``. Repeated NOGROUPs back off exponentially
  and are logged at most once per 10 s per key: no hot loop.
- a changed epoch (seen on NOGROUP or by the periodic check) means the shard was rebuilt:
  acknowledgements for entries of the old stream are dropped, and ``on_reset(shard)`` is
  awaited so that the consumer can reconcile with Postgres (projectors compare stream versions).
- a missing epoch means Redis lost its data and the relay has not rebuilt the shard yet: the
  consumer keeps reading (its group, created at 0, receives what the relay republishes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import ResponseError

from awooop.core.logs import get_logger
from awooop.streams import scripts
from awooop.streams.backoff import RateLimiter
from awooop.streams.consumer_acks import Acks, LogError
from awooop.streams.consumer_stats import ConsumerStats
from awooop.streams.delivery import Delivery, text
from awooop.streams.keys import Keys

log = get_logger(__name__)

OnReset = Callable[[int], Awaitable[None]]


def is_nogroup(exc: BaseException) -> bool:
    return isinstance(exc, ResponseError) and str(exc).startswith("NOGROUP")


class GroupEpochs:
    """The group on each stream, the epoch last seen per shard, and the last id read."""

    def __init__(
        self,
        redis: Any,
        *,
        group: str,
        streams: list[str],
        keys: Keys,
        on_reset: OnReset | None,
        stats: ConsumerStats,
        acks: Acks,
        limiter: RateLimiter,
        log_error: LogError,
    ) -> None:
        self.redis = redis
        self.group = group
        self.streams = streams
        self.keys = keys
        self.on_reset = on_reset
        self.stats = stats
        self.acks = acks
        self._limiter = limiter
        self._log_error = log_error
        self._epochs: dict[str, str] = {}  # epoch key -> the value last seen
        self._last_ids: dict[str, str] = {}  # stream -> last entry id read in this epoch
        # stream -> epoch changes: a handler that finishes after one must not acknowledge
        self.generation: defaultdict[str, int] = defaultdict(int)

    def read(self, stream: str, entry_id: str) -> None:
        """An entry was read: a group recreated on a surviving stream starts after it."""
        self._last_ids[stream] = entry_id

    async def ensure_groups(self) -> None:
        """Create the group on every stream where it is missing (see the module docstring)."""
        for stream in self.streams:
            await self._ensure(stream)

    async def _ensure(self, stream: str) -> None:
        epoch_key = self.keys.epoch_of(stream)
        known = self._epochs.get(epoch_key, "")
        last = self._last_ids.get(stream, "") if known else ""
        current, start, created = await scripts.ENSURE_GROUP(
            self.redis, [epoch_key, stream], [self.group, known, last]
        )
        await self._observe_epoch(epoch_key, text(current) or None)
        if int(created):
            log.info(
                "stream_group_created",
                stream=stream,
                group=self.group,
                start=text(start),
                epoch=text(current) or None,
            )

    async def check_epochs(self) -> None:
        """Read every epoch key of our streams and react to changes (normally periodic)."""
        epoch_keys = sorted({self.keys.epoch_of(s) for s in self.streams})
        pipe = self.redis.pipeline(transaction=False)
        for key in epoch_keys:
            pipe.get(key)
        values = await pipe.execute()
        for key, value in zip(epoch_keys, values, strict=True):
            await self._observe_epoch(key, text(value) if value is not None else None)

    async def learn_epochs(self, deliveries: Sequence[Delivery]) -> None:
        """Entries of a generation whose epoch this consumer never saw (it started before the
        relay wrote it): learn it now, or a wipe before the next periodic check would make
        the rebuilt shard's epoch look like the first one (no reset seen). A failed read
        here is left to the periodic check; the deliveries are handled either way."""
        for epoch_key in sorted({self.keys.epoch_of(d.stream) for d in deliveries}):
            if epoch_key in self._epochs:
                continue
            try:
                value = await self.redis.get(epoch_key)
            except Exception as exc:  # not only RedisError: see Acks.flush
                self._log_error("stream_epoch_check_failed", exc)
                break
            await self._observe_epoch(epoch_key, text(value) if value is not None else None)

    async def _observe_epoch(self, epoch_key: str, value: str | None) -> None:
        if value is None:
            suppressed = self._limiter.allow("epoch-missing:" + epoch_key)
            if suppressed is None:
                return
            if epoch_key not in self._epochs:
                # Never seen one: a first start on an empty Redis (the relay writes the epoch
                # when it first initialises the shard), or a loss before this process came.
                # Nothing this process knew is gone: not a warning.
                log.info(
                    "stream_epoch_not_yet_written",
                    epoch_key=epoch_key,
                    group=self.group,
                    suppressed=suppressed,
                    hint="a first start: the relay writes it when it initialises the shard",
                )
                return
            log.warning(
                "stream_epoch_missing",
                epoch_key=epoch_key,
                group=self.group,
                suppressed=suppressed,
                hint="Redis lost its data; the relay rebuilds the shard from Postgres",
            )
            return
        known = self._epochs.get(epoch_key)
        self._epochs[epoch_key] = value
        if known is None or known == value:
            return
        self.stats.resets += 1
        affected = [s for s in self.streams if self.keys.epoch_of(s) == epoch_key]
        for stream in affected:
            self.generation[stream] += 1
            self._last_ids.pop(stream, None)
            self.acks.drop(stream)
        log.warning(
            "stream_reset_detected", epoch_key=epoch_key, group=self.group, old=known, new=value
        )
        if self.on_reset is not None and epoch_key != self.keys.notices_epoch():
            try:
                await self.on_reset(self.keys.stream_shard(affected[0]))
            except Exception:
                log.exception("stream_on_reset_failed", epoch_key=epoch_key, group=self.group)

    async def recover_nogroup(self, streams: Sequence[str], exc: BaseException) -> None:
        self.stats.nogroup += 1
        suppressed = self._limiter.allow("nogroup:" + ",".join(streams))
        if suppressed is not None:
            log.warning(
                "stream_group_missing",
                streams=list(streams),
                group=self.group,
                error=str(exc),
                suppressed=suppressed,
            )
        for stream in streams:
            await self._ensure(stream)
