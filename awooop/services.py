"""The shared clients of one process: settings, database pools, Redis, stream keys."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from awooop.config import Settings
from awooop.db import Database
from streams.keys import Keys


def redis_client(url: str) -> Any:
    """A Redis client for ``url``: ``redis+cluster://`` selects the cluster client."""
    if url.startswith("redis+cluster://"):
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url("redis://" + url.removeprefix("redis+cluster://"))
    return aioredis.Redis.from_url(url)


@dataclass
class Services:
    settings: Settings
    db: Database
    redis: Any  # redis.asyncio.Redis or RedisCluster: both speak the commands we use
    keys: Keys
    # Resources a component opened on these services (for example the ingest route's pool),
    # closed first by close().
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @classmethod
    async def open(
        cls, settings: Settings, db_pool_size: int = 10, db_run_min: int = 0
    ) -> Services:
        db = await Database.open(
            settings.database_url, max_size=db_pool_size, run_min_size=db_run_min
        )
        return cls(
            settings=settings,
            db=db,
            redis=redis_client(settings.redis_url),
            keys=Keys(settings.redis_key_prefix, settings.shard_count),
        )

    async def close(self) -> None:
        for closer in reversed(self.closers):
            await closer()
        self.closers.clear()
        await self.redis.aclose()
        await self.db.close()
