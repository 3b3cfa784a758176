"""The process's database access: the role pools and their transactions, with retries.

Two pools, two roles (R-43, :mod:`awooop.core.pools`):
- ``tenant(project_id)``: a transaction as ``awooop_app`` with ``awooop.project_id`` set
  transaction-locally; row-level security shows that project's rows only. A connection of
  this pool without the setting sees no tenant rows at all.
- ``platform()``: a READ ONLY transaction as ``awooop_platform`` (BYPASSRLS): reads across
  projects (operators' listings, stats, doctor, authentication lookups).
- ``platform_writes()``: a writing transaction as ``awooop_platform``, named apart because it
  bypasses row-level security: platform loops (reaper, expiry, loop heartbeats, projectors,
  polling claims) and administration (channels, tokens). A write put on ``platform()`` by
  mistake fails at once (``ReadOnlySQLTransactionError``) instead of silently skipping the
  tenant check.

A third pool, also ``awooop_platform``, serves only the statements on every run's path in the
worker (claims, completions, fenced writes: :meth:`Database.in_run_statement`,
:meth:`Database.in_run_transaction`) with cached generic plans
(:data:`awooop.core.pools.CACHED_PLAN_SETTINGS`). The tenant sessions (outside transactions)
are in :mod:`awooop.core.sessions`, the per-statement bound in :mod:`awooop.core.bounded`,
the retry rules in :mod:`awooop.core.retries`.

A request's bound (:func:`request_bound`, set by the HTTP layer for management and console
requests) applies to every role-pool transaction opened under it: a connection must be had
within the bound, each statement is given ``statement_timeout`` (transaction-local, set with
the tenant in the same statement), and a statement that the server cancels for it is
:class:`DatabaseBusyError` (503 ``E-DB-003``, with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TypeVar

import asyncpg

from awooop.core.bounded import bounded
from awooop.core.errors import DatabaseBusyError
from awooop.core.pools import (
    APP_ROLE,
    PLATFORM_ROLE,
    SET_TENANT,
    Pool,
    create_pool,
    drop_if_poisoned,
    milliseconds,
)
from awooop.core.pools import Connection as Connection  # the type most callers name with Database
from awooop.core.retries import RETRYABLE_PG_ERRORS, retry_transaction
from awooop.core.sessions import TenantSessions

T = TypeVar("T")

# The statement timeout of the request being served (None: not a bounded request).
_REQUEST_BOUND_S: ContextVar[float | None] = ContextVar("awooop_request_bound_s", default=None)
SET_TENANT_BOUNDED = (
    "SELECT set_config('awooop.project_id', $1, true), set_config('statement_timeout', $2, true)"
)
SET_BOUND = "SELECT set_config('statement_timeout', $1, true)"


@contextlib.contextmanager
def request_bound(seconds: float) -> Iterator[None]:
    """Within this block (and the tasks it starts), role-pool transactions are bounded."""
    token = _REQUEST_BOUND_S.set(seconds)
    try:
        yield
    finally:
        _REQUEST_BOUND_S.reset(token)


class Database:
    """The role pools of one process, and the worker's run pool.

    ``run_timeout_s`` bounds every use of the run pool (a worker's claims, completions and
    fenced writes: see :func:`bounded`); the worker sets it to ``Settings.lease_io_timeout_s``. The
    other pools are bounded per call (``timeout_s=``) where a lease depends on the answer."""

    def __init__(
        self,
        tenant_pool: Pool,
        platform_pool: Pool,
        run_pool: Pool,
        sessions: TenantSessions,
        run_timeout_s: float | None = None,
    ) -> None:
        self.tenant_pool = tenant_pool
        self.platform_pool = platform_pool
        self.run_pool = run_pool
        self.sessions = sessions  # opened at first use
        self.run_timeout_s = run_timeout_s

    @classmethod
    async def open(
        cls,
        url: str,
        max_size: int = 10,
        run_min_size: int = 0,
        run_timeout_s: float | None = None,
    ) -> Database:
        """The pools; ``run_min_size`` run-pool connections are opened now and kept open (a
        worker's claims, completions and fenced writes; other processes open none).
        ``run_timeout_s`` bounds every run-pool statement on the client (:func:`bounded`) AND
        on the server (statement, lock and idle-in-transaction timeouts), so that a claim,
        renewal or fenced write the worker gave up on cannot run later."""
        pools: list[Pool] = []
        try:
            pools.append(await create_pool(url, APP_ROLE, max_size=max_size))
            pools.append(await create_pool(url, PLATFORM_ROLE, max_size=max_size))
            pools.append(
                await create_pool(
                    url,
                    PLATFORM_ROLE,
                    min_size=run_min_size,
                    max_size=max_size,
                    cached_plans=True,
                    bound_s=run_timeout_s,
                )
            )
        except BaseException:
            await asyncio.gather(*(pool.close() for pool in pools))
            raise
        tenant_pool, platform_pool, run_pool = pools
        return cls(
            tenant_pool, platform_pool, run_pool, TenantSessions(url, max_size), run_timeout_s
        )

    async def close(self) -> None:
        await asyncio.gather(
            self.tenant_pool.close(),
            self.platform_pool.close(),
            self.run_pool.close(),
            self.sessions.close(),
        )

    @asynccontextmanager
    async def tenant(
        self, project_id: str, *, timeout_s: float | None = None
    ) -> AsyncIterator[Connection]:
        async with self._transaction(self.tenant_pool, timeout_s, project_id=project_id) as conn:
            yield conn

    @asynccontextmanager
    async def platform(self, *, timeout_s: float | None = None) -> AsyncIterator[Connection]:
        async with self._transaction(self.platform_pool, timeout_s, readonly=True) as conn:
            yield conn

    @asynccontextmanager
    async def platform_writes(self, *, timeout_s: float | None = None) -> AsyncIterator[Connection]:
        async with self._transaction(self.platform_pool, timeout_s) as conn:
            yield conn

    @staticmethod
    @asynccontextmanager
    async def _transaction(
        pool: Pool,
        timeout_s: float | None,
        *,
        readonly: bool = False,
        project_id: str | None = None,
    ) -> AsyncIterator[Connection]:
        """A transaction on ``pool`` (as ``project_id``'s tenant when given); bounded per
        statement by ``timeout_s`` (:func:`bounded`) or by the request's bound."""
        if timeout_s is not None:
            async with bounded(pool, timeout_s, transaction=True, readonly=readonly) as conn:
                if project_id is not None:
                    await conn.execute(SET_TENANT, project_id)
                yield conn
            return
        bound = _REQUEST_BOUND_S.get()
        if bound is None:
            async with pool.acquire() as conn:
                with drop_if_poisoned(conn):
                    async with conn.transaction(readonly=readonly):
                        if project_id is not None:
                            await conn.execute(SET_TENANT, project_id)
                        yield conn
            return
        try:
            conn = await pool.acquire(timeout=bound)
        except TimeoutError as exc:
            raise DatabaseBusyError(
                f"no database connection within {bound:g} s (AWOOOP_HTTP_STATEMENT_TIMEOUT_S)"
            ) from exc
        try:
            with drop_if_poisoned(conn):
                async with conn.transaction(readonly=readonly):
                    if project_id is not None:
                        await conn.execute(SET_TENANT_BOUNDED, project_id, milliseconds(bound))
                    else:
                        await conn.execute(SET_BOUND, milliseconds(bound))
                    yield conn
        except asyncpg.QueryCanceledError as exc:
            raise DatabaseBusyError(
                f"a database statement did not finish within {bound:g} s "
                "(AWOOOP_HTTP_STATEMENT_TIMEOUT_S)"
            ) from exc
        finally:
            await pool.release(conn)

    @asynccontextmanager
    async def _run_connection(self) -> AsyncIterator[Connection]:
        if self.run_timeout_s is not None:
            async with bounded(self.run_pool, self.run_timeout_s, transaction=False) as conn:
                yield conn
            return
        async with self.run_pool.acquire() as conn:
            with drop_if_poisoned(conn):
                yield conn

    async def in_tenant(
        self,
        project_id: str,
        fn: Callable[[Connection], Awaitable[T]],
        attempts: int = 5,
        *,
        timeout_s: float | None = None,
        retry_on: tuple[type[BaseException], ...] = RETRYABLE_PG_ERRORS,
    ) -> T:
        """Run ``fn`` in a tenant transaction, retrying transient conflicts (``retry_on``: see
        :func:`retry_transaction`); ``timeout_s`` bounds each try (:func:`bounded`)."""

        async def once() -> T:
            async with self.tenant(project_id, timeout_s=timeout_s) as conn:
                return await fn(conn)

        return await retry_transaction(once, attempts, retry_on=retry_on)

    async def in_run_statement(
        self, fn: Callable[[Connection], Awaitable[T]], attempts: int = 5
    ) -> T:
        """Run ``fn`` on a run-pool connection OUTSIDE a transaction: each of its statements
        commits on its own (no BEGIN, no COMMIT: one round trip). Only for a worker's work that
        is one statement (``leases.claim_many``, ``leases.complete_many``, the heartbeat);
        retried like a transaction on deadlocks."""

        async def once() -> T:
            async with self._run_connection() as conn:
                return await fn(conn)

        return await retry_transaction(once, attempts)

    async def on_run_connections(
        self, count: int, fn: Callable[[Connection], Awaitable[None]]
    ) -> None:
        """``fn`` on ``count`` distinct run-pool connections at once (all held meanwhile): to
        prepare each connection a worker's flushes will use (``leases.prepare_run_statements``)."""
        async with contextlib.AsyncExitStack() as stack:
            conns = [await stack.enter_async_context(self.run_pool.acquire()) for _ in range(count)]
            await asyncio.gather(*(fn(conn) for conn in conns))

    async def in_run_transaction(
        self, fn: Callable[[Connection], Awaitable[T]], attempts: int = 5
    ) -> T:
        """A platform transaction on the run pool: for a worker's fenced writes only (each
        statement run there must keep a good generic plan, see
        :data:`awooop.core.pools.CACHED_PLAN_SETTINGS`)."""

        async def once() -> T:
            async with self._run_connection() as conn, conn.transaction():
                return await fn(conn)

        return await retry_transaction(once, attempts)

    async def in_platform(
        self,
        fn: Callable[[Connection], Awaitable[T]],
        attempts: int = 5,
        *,
        timeout_s: float | None = None,
    ) -> T:
        """Run ``fn`` in a READ ONLY platform transaction (:meth:`platform`), with retries."""

        async def once() -> T:
            async with self.platform(timeout_s=timeout_s) as conn:
                return await fn(conn)

        return await retry_transaction(once, attempts)

    async def in_platform_writes(
        self,
        fn: Callable[[Connection], Awaitable[T]],
        attempts: int = 5,
        *,
        timeout_s: float | None = None,
    ) -> T:
        """Run ``fn`` in a writing platform transaction (:meth:`platform_writes`), with
        retries."""

        async def once() -> T:
            async with self.platform_writes(timeout_s=timeout_s) as conn:
                return await fn(conn)

        return await retry_transaction(once, attempts)
