"""The producer's drivers, each behind one small interface, so that one test module checks
them all alike (tests/integration/test_producer_drivers.py).

A :class:`Tx` is a caller's open transaction on a login's connection: ``call`` runs a producer
function (``awooop.producer``'s for the async drivers, ``awooop.producer.sync``'s for the sync
ones) on it, ``execute`` runs the caller's own SQL (``own_row``: a row of ``orders``). Sync
drivers run every call of a transaction on one thread of their own (Django's connections
belong to a thread), off the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from awooop import producer
from awooop.producer import sync as producer_sync


class Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


class Tx:
    def __init__(self, target: Any, own: Callable[[str], Any], run: Callable[..., Any]) -> None:
        self.target = target
        self._own = own  # runs the caller's own SQL
        self._run = run  # runs a function with its arguments (on the driver's thread)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        api = producer if self._run is _awaited else producer_sync
        return await self._run(getattr(api, name), self.target, *args, **kwargs)

    async def own_row(self, order: int) -> None:
        await self.execute(f"INSERT INTO orders VALUES ({int(order)}, '{{}}')")

    async def execute(self, sql: str) -> None:
        await self._run(self._own, sql)


async def _awaited(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await fn(*args, **kwargs)


def _url(url: str, scheme: str) -> str:
    return scheme + url.split("://", 1)[1]


# --- async drivers ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def asyncpg_tx(url: str, begin: bool = True) -> AsyncIterator[Tx]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        own = conn.execute
        if not begin:
            yield Tx(conn, own, _awaited)
            return
        with contextlib.suppress(Rollback):
            async with conn.transaction():
                yield Tx(conn, own, _awaited)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def psycopg_async_tx(url: str, begin: bool = True) -> AsyncIterator[Tx]:
    import psycopg

    conn = await psycopg.AsyncConnection.connect(url, autocommit=not begin)
    try:
        own = conn.execute
        if not begin:
            yield Tx(conn, own, _awaited)
            return
        with contextlib.suppress(Rollback):
            async with conn.transaction():
                yield Tx(conn, own, _awaited)
    finally:
        await conn.close()


def _sqlalchemy_async(scheme: str) -> Any:
    @contextlib.asynccontextmanager
    async def tx(url: str, begin: bool = True) -> AsyncIterator[Tx]:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        engine = create_async_engine(_url(url, scheme))
        try:
            if not begin:  # a Connection that has begun nothing
                async with engine.connect() as conn:
                    yield Tx(conn, lambda sql: conn.execute(text(sql)), _awaited)
                return
            async with AsyncSession(engine) as session:
                with contextlib.suppress(Rollback):
                    async with session.begin():
                        yield Tx(session, lambda sql: session.execute(text(sql)), _awaited)
        finally:
            await engine.dispose()

    return tx


# --- sync drivers: every call of a transaction on one thread ---------------------------------


@contextlib.asynccontextmanager
async def _on_a_thread(
    enter: Callable[[], tuple[Any, Callable[[str], Any], Callable[[BaseException | None], Any]]],
) -> AsyncIterator[Tx]:
    """``enter`` (on the thread) opens the transaction and returns the target, the caller's own
    write and the exit (given the exception that ends the block, or None)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()

    async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await loop.run_in_executor(pool, lambda: fn(*args, **kwargs))

    try:
        target, own, leave = await run(enter)
        try:
            yield Tx(target, own, run)
        except BaseException as exc:
            await run(leave, exc)
            if not isinstance(exc, Rollback):
                raise
        else:
            await run(leave, None)
    finally:
        pool.shutdown()


def _leaving(*blocks: Any) -> Callable[[BaseException | None], None]:
    """The exit of context managers entered in order (the last one first)."""

    def leave(exc: BaseException | None) -> None:
        for block in reversed(blocks):
            block.__exit__(type(exc) if exc else None, exc, None)

    return leave


@contextlib.asynccontextmanager
async def psycopg_sync_tx(url: str, begin: bool = True) -> AsyncIterator[Tx]:
    def enter() -> Any:
        import psycopg

        conn = psycopg.connect(url, autocommit=not begin)
        own = conn.execute
        block = conn.transaction() if begin else contextlib.nullcontext()
        block.__enter__()
        return conn, own, _leaving(conn, block)

    async with _on_a_thread(enter) as tx:
        yield tx


@contextlib.asynccontextmanager
async def sqlalchemy_psycopg_tx(url: str, begin: bool = True) -> AsyncIterator[Tx]:
    def enter() -> Any:
        from sqlalchemy import create_engine, text
        from sqlalchemy.orm import Session

        engine = create_engine(_url(url, "postgresql+psycopg://"))
        disposing = contextlib.closing(_Disposer(engine))
        if not begin:
            conn = engine.connect()
            return conn, lambda sql: conn.execute(text(sql)), _leaving(disposing, conn)
        session = Session(engine)
        block = session.begin()
        block.__enter__()
        own = lambda sql: session.execute(text(sql))  # noqa: E731
        return session, own, _leaving(disposing, session, block)

    async with _on_a_thread(enter) as tx:
        yield tx


class _Disposer:
    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def close(self) -> None:
        self.engine.dispose()


@contextlib.asynccontextmanager
async def django_tx(url: str, begin: bool = True) -> AsyncIterator[Tx]:
    alias = f"t{uuid.uuid4().hex[:8]}"

    def enter() -> Any:
        from django.db import connections, transaction

        configure_django()
        connections.settings[alias] = django_database(url)
        conn = connections[alias]

        def own(sql: str) -> None:
            with conn.cursor() as cursor:
                cursor.execute(sql)

        block = transaction.atomic(using=alias) if begin else contextlib.nullcontext()
        block.__enter__()
        return conn, own, _leaving(contextlib.closing(_Closer(alias)), block)

    async with _on_a_thread(enter) as tx:
        yield tx


class _Closer:
    def __init__(self, alias: str) -> None:
        self.alias = alias

    def close(self) -> None:
        from django.db import connections

        connections[self.alias].close()
        del connections[self.alias]
        del connections.settings[self.alias]


def configure_django() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(DATABASES={}, USE_TZ=True, INSTALLED_APPS=[])
        django.setup()


def django_database(url: str) -> dict[str, Any]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username,
        "PASSWORD": parts.password,
        "HOST": parts.hostname,
        "PORT": parts.port or 5432,
        "ATOMIC_REQUESTS": False,
        "AUTOCOMMIT": True,
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": False,
        "OPTIONS": {},
        "TIME_ZONE": None,
        "TEST": {},
    }


DRIVERS: dict[str, Any] = {
    "asyncpg": asyncpg_tx,
    "psycopg-async": psycopg_async_tx,
    "sqlalchemy-asyncpg": _sqlalchemy_async("postgresql+asyncpg://"),
    "sqlalchemy-psycopg-async": _sqlalchemy_async("postgresql+psycopg://"),
    "psycopg": psycopg_sync_tx,
    "sqlalchemy-psycopg": sqlalchemy_psycopg_tx,
    "django": django_tx,
}
