"""What code above the transport needs of a process's clients: Redis and its key names.

:class:`awooop.services.Services` is one; domain code asks for this shape (or a narrower
extension of it) instead of importing the process's service bundle, which sits above it.
"""

from __future__ import annotations

from typing import Any, Protocol

from awooop.streams.keys import Keys


class StreamClients(Protocol):
    @property
    def redis(self) -> Any: ...  # redis.asyncio.Redis or RedisCluster

    @property
    def keys(self) -> Keys: ...
