"""The shared clients of one process: settings, database pools, Redis, stream keys."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import redis.asyncio as aioredis

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError
from awooop.core.logs import get_logger
from awooop.core.processes import NO_ROUTES, Serves
from awooop.core.schema_check import require_runnable_schema
from awooop.core.schema_watch import SchemaWatch
from awooop.streams.keys import Keys

log = get_logger(__name__)
T = TypeVar("T")
# How long a starting process waits for the database before it gives up (E-DB-001, exit 1).
DATABASE_WAIT_S = 60.0


def redis_client(url: str, socket_timeout_s: float | None = None) -> Any:
    """A Redis client for ``url``: ``redis+cluster://`` selects the cluster client.

    ``socket_timeout_s`` (``AWOOOP_REDIS_SOCKET_TIMEOUT_S``) bounds every command and connect:
    a Redis that accepts packets and never answers raises a timeout instead of hanging its
    caller forever."""
    if url.startswith("redis+cluster://"):
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(
            "redis://" + url.removeprefix("redis+cluster://"),
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
        )
    return aioredis.Redis.from_url(
        url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s
    )


@overload
async def when_reachable(
    step: Callable[[], Awaitable[T]], *, stop: None = ..., wait_s: float = ...
) -> T: ...


@overload
async def when_reachable(
    step: Callable[[], Awaitable[T]], *, stop: asyncio.Event, wait_s: float = ...
) -> T | None: ...


async def when_reachable(
    step: Callable[[], Awaitable[T]],
    *,
    stop: asyncio.Event | None = None,
    wait_s: float = DATABASE_WAIT_S,
) -> T | None:
    """``step`` (a starting process's use of the database), tried again with backoff up to
    ``wait_s`` while the database is away in any form (E-DB-001: refused, reset, no free
    connection slot, starting or shutting down), then its error. None when ``stop`` is set
    meanwhile. Every step between a process's start and its first unit of work goes through
    here: a server that is full for a moment must not end a process that only starts."""
    deadline = time.monotonic() + wait_s
    delay = 0.5
    while True:
        try:
            return await step()
        except DatabaseUnavailableError as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("waiting_for_database", error=str(exc), retry_in_s=delay)
        if stop is None:
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
            if stop.is_set():
                return None
        delay = min(delay * 2, 5.0)


@dataclass
class Services:
    settings: Settings
    db: Database
    redis: Any  # redis.asyncio.Redis or RedisCluster: both speak the commands we use
    keys: Keys
    # Resources a component opened on these services (for example the ingest route's pool),
    # closed first by close().
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # The process's row in awooop_processes and its schema re-check (long-running processes).
    watch: SchemaWatch | None = None
    # Set when the process starts to stop: long-lived responses (output streams) end at once,
    # so that a graceful shutdown does not wait its whole grace for readers who never leave.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def open(
        cls, settings: Settings, db_pool_size: int = 10, db_run_min: int = 0
    ) -> Services:
        db = await Database.open(
            settings.database_url,
            max_size=db_pool_size,
            run_min_size=db_run_min,
            run_timeout_s=settings.lease_io_timeout_s,
        )
        return cls(
            settings=settings,
            db=db,
            redis=redis_client(settings.redis_url, settings.redis_socket_timeout_s),
            keys=Keys(settings.redis_key_prefix, settings.shard_count),
        )

    @overload
    @classmethod
    async def open_when_reachable(
        cls,
        settings: Settings,
        db_pool_size: int = ...,
        db_run_min: int = ...,
        *,
        stop: None = ...,
        wait_s: float = ...,
        kind: str | None = ...,
        serves: Serves = ...,
    ) -> Services: ...

    @overload
    @classmethod
    async def open_when_reachable(
        cls,
        settings: Settings,
        db_pool_size: int = ...,
        db_run_min: int = ...,
        *,
        stop: asyncio.Event,
        wait_s: float = ...,
        kind: str | None = ...,
        serves: Serves = ...,
    ) -> Services | None: ...

    @classmethod
    async def open_when_reachable(
        cls,
        settings: Settings,
        db_pool_size: int = 10,
        db_run_min: int = 0,
        *,
        stop: asyncio.Event | None = None,
        wait_s: float = DATABASE_WAIT_S,
        kind: str | None = None,
        serves: Serves = NO_ROUTES,
    ) -> Services | None:
        """:meth:`open`, waiting up to ``wait_s`` with backoff while the database is away in any
        form (refused, reset, no answer, no free connection slot, starting up or shutting down:
        ``awooop.core.retries.CONNECTION_ERRORS``): a process started during a Postgres restart,
        or while every connection slot is taken, comes up when the database can have it instead
        of exiting. A wrong address still fails, after the wait (E-DB-001). None when ``stop``
        is set meanwhile. A schema this release cannot run on fails at once (E-MIGRATE-003,
        awooop/core/schema_check.py): what long-running processes open their services with.
        With ``kind`` (the process's command), the process registers in the fleet and keeps
        checking the schema while it runs (:class:`awooop.core.schema_watch.SchemaWatch`); a
        worker process records there what it ``serves`` (its routes and handler version)."""

        async def opened() -> Services:
            services = await cls._open_on_runnable_schema(settings, db_pool_size, db_run_min)
            if kind is not None:
                await services.watch_schema(kind, serves)
            return services

        return await when_reachable(opened, stop=stop, wait_s=wait_s)

    @classmethod
    async def _open_on_runnable_schema(
        cls, settings: Settings, db_pool_size: int, db_run_min: int
    ) -> Services:
        services = await cls.open(settings, db_pool_size=db_pool_size, db_run_min=db_run_min)
        try:
            async with services.db.platform() as conn:
                await require_runnable_schema(conn)
        except BaseException:
            await services.close()
            raise
        return services

    async def watch_schema(self, kind: str, serves: Serves = NO_ROUTES) -> None:
        watch = SchemaWatch(self.db, kind, self.settings.schema_recheck_s, serves=serves)
        try:
            await watch.start()
        except BaseException:
            await self.close()
            raise
        self.watch = watch

    async def close(self) -> None:
        if self.watch is not None:
            await self.watch.stop()
            self.watch = None
        for closer in reversed(self.closers):
            await closer()
        self.closers.clear()
        await self.redis.aclose()
        await self.db.close()
