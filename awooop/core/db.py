"""Postgres access: connection pools per role, tenant and platform transactions, retries.

Two pools, two roles (R-43):
- ``tenant(project_id)``: a transaction as ``awooop_app`` with ``awooop.project_id`` set
  transaction-locally; row-level security shows that project's rows only. A connection of
  this pool without the setting sees no tenant rows at all.
- ``platform()``: a transaction as ``awooop_platform`` (BYPASSRLS) for platform loops (relay,
  reaper, reclaim, expiry) that work across projects.

A third pool, also ``awooop_platform``, serves only the statements on every run's path in the
worker (claims, completions, fenced writes: :meth:`Database.in_run_statement`,
:meth:`Database.in_run_transaction`) with cached generic plans (:data:`CACHED_PLAN_SETTINGS`).

JSON and JSONB columns are encoded and decoded with msgspec on every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import asyncpg
import msgspec

from awooop.core.errors import DatabaseUnavailableError, StreamOrderConflictError

T = TypeVar("T")
if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    Pool: TypeAlias = asyncpg.Pool[asyncpg.Record]
else:
    Connection = asyncpg.Connection
    Pool = asyncpg.Pool

APP_ROLE = "awooop_app"
PLATFORM_ROLE = "awooop_platform"

SET_TENANT = "SELECT set_config('awooop.project_id', $1, true)"
# For connections dedicated to one tenant path (ingest sessions, the pointer check) that keep
# the project at session level and only change it when the next use is for another project.
SET_SESSION_TENANT = "SELECT set_config('awooop.project_id', $1, false)"

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode

RETRYABLE_PG_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    StreamOrderConflictError,
)
# Postgres being away or full, in every form it takes: refused or reset (OSError), no answer
# in time (TimeoutError, a cancelled statement), a lost or rejected connection (class 08), no
# free connection slot (53300), the server starting up or shutting down (57P01-57P03), and
# asyncpg's own "connection is closed". One family: every process waits these out with
# backoff (awooop.loops.framework, the worker's start) and none of them is a run's failure.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.TooManyConnectionsError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.QueryCanceledError,
    asyncpg.InterfaceError,
)


async def init_connection(conn: Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name,
            schema="pg_catalog",
            encoder=lambda value: _json_encode(value).decode(),
            decoder=_json_decode,
            format="text",
        )


async def connect(
    url: str, role: str | None = None, connect_timeout: float = 10.0, *, cached_plans: bool = False
) -> Connection:
    """One connection (for LISTEN, migrations, advisory-lock owners); ``cached_plans``: see
    :data:`CACHED_PLAN_SETTINGS`."""
    settings = {"role": role} if role else {}
    if cached_plans:
        settings.update(CACHED_PLAN_SETTINGS)
    try:
        conn = await asyncpg.connect(url, server_settings=settings, timeout=connect_timeout)
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"cannot connect to the database: {exc}") from exc
    await init_connection(conn)
    return conn


async def _transaction_scoped_reset(_conn: Any) -> None:
    """Release without asyncpg's reset query (RESET ALL, UNLISTEN *, CLOSE ALL, advisory
    unlock): one round trip on every transaction's path, for session state these pools never
    hold. Their connections are used only through :meth:`Database.tenant` and
    :meth:`Database.platform`, inside one transaction each: the tenant is set with
    ``set_config(..., true)`` (transaction-local), LISTEN and session advisory locks live on
    dedicated connections (:func:`connect`). asyncpg still rolls back an open transaction and
    drops client-side listeners before this runs."""


# Custom plans for every statement of the role pools. asyncpg prepares each statement once per
# connection, and Postgres switches a prepared statement to a cached generic plan after five
# runs; a generic plan made while a table was small (a fresh deployment, a table that grew
# since its last ANALYZE) keeps a sequential scan where the table is now large. Seen in the
# worker: each 1-row UPDATE of awooop_run_state by primary key took up to 10 ms over 5,000
# rows, a claim of 63 runs 72 ms instead of 15-20, until autovacuum's ANALYZE replaced the
# plan (one worker: 330-1,300 no-op runs/s depending on when that happened; 920-1,000 with
# custom plans). Planning each execution costs about 0.1 ms per statement.
PLAN_CACHE_MODE = "force_custom_plan"

# Connections that run a FIXED set of statements on every run's path (the relay's connection,
# the worker's run pool, the HTTP ingest sessions) plan each statement once and keep that
# generic plan. These are CTE statements over several tables: planning one took 0.3-0.6 ms of
# Postgres CPU, executing it 0.02-0.5 ms (pg_stat_statements with track_planning, 100 runs/s):
# planning was over half of Postgres's work per run. A generic plan made while a table was
# small could keep a sequential scan as the table grows (the role pools' reason to plan every
# execution, above); with sequential scans disabled the planner takes an index path wherever
# one exists, and tests/integration/test_cached_plans.py checks that the generic plan of every
# statement these connections prepare, made on an empty database, scans no table sequentially.
CACHED_PLAN_SETTINGS = {"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}


async def create_pool(
    url: str, role: str, min_size: int = 1, max_size: int = 10, *, cached_plans: bool = False
) -> Pool:
    settings = {"role": role, "plan_cache_mode": PLAN_CACHE_MODE}
    if cached_plans:
        settings.update(CACHED_PLAN_SETTINGS)
    try:
        pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=init_connection,
            reset=_transaction_scoped_reset,
            server_settings=settings,
            timeout=10.0,
        )
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"cannot connect to the database: {exc}") from exc
    return pool


# --- tenant sessions ---------------------------------------------------------------------------


class TenantConnection(asyncpg.Connection):
    """A pool connection that remembers the project its session is set to."""

    session_project: str | None = None

    def remember_project(self, project_id: str | None) -> None:
        self.session_project = project_id


async def _keep_session(_conn: Any) -> None:
    """Release without RESET ALL: the session's project is the point (see TenantSessions)."""


class TenantSessions:
    """Tenant connections used OUTSIDE transactions, whose SESSION carries the project.

    Why: on this kind of machine a round trip to Postgres costs more than everything else an
    ingest does, and a tenant transaction spends four on bookkeeping (BEGIN, the tenant
    setting, COMMIT, the pool's session reset) around the two that do the work (read the
    channel's configuration, then one statement that writes the dedupe row, the run and its
    event). A single delivery needs no multi-statement transaction: the read comes first
    anyway, and the write is a single statement, atomic on its own. So this pool (role
    ``awooop_app``, row-level security as everywhere) keeps ``awooop.project_id`` at session
    level, set when a connection is first used for a project and only changed when the next
    use is for another project. A delivery then costs two round trips (three for a repeat:
    the lookup of the existing run). Its statements keep cached generic plans
    (:data:`CACHED_PLAN_SETTINGS`). Used by the HTTP ingest route (a pool of its own) and by
    :func:`awooop.producer.submit` with a :class:`Database` (``Database.sessions``).

    The guard that a forgotten setting shows no rows is kept by construction: these
    connections are used only through :meth:`session`, which sets (or checks) the project
    before handing a connection out, and no other code acquires from this pool.
    """

    def __init__(self, url: str, max_size: int) -> None:
        self.url = url
        self.max_size = max_size
        self._pool: Pool | None = None
        self._opening = asyncio.Lock()

    async def _open(self) -> Pool:
        async with self._opening:
            if self._pool is None:
                try:
                    self._pool = await asyncpg.create_pool(
                        self.url,
                        min_size=1,
                        max_size=self.max_size,
                        init=init_connection,
                        reset=_keep_session,
                        connection_class=TenantConnection,
                        server_settings={"role": APP_ROLE, **CACHED_PLAN_SETTINGS},
                        timeout=10.0,
                    )
                except CONNECTION_ERRORS as exc:
                    raise DatabaseUnavailableError(
                        f"cannot connect to the database: {exc}"
                    ) from exc
            return self._pool

    @asynccontextmanager
    async def session(self, project_id: str) -> AsyncIterator[Connection]:
        """A connection outside any transaction whose session is set to ``project_id``."""
        pool = self._pool or await self._open()
        with unavailable_on_connection_errors("lost the database connection"):
            async with pool.acquire() as conn:
                # The pool's proxy forwards attributes to its TenantConnection.
                tenant = cast(TenantConnection, conn)
                if tenant.session_project != project_id:
                    tenant.remember_project(None)
                    await conn.execute(SET_SESSION_TENANT, project_id)
                    tenant.remember_project(project_id)
                yield conn

    async def run(
        self, project_id: str, fn: Callable[[Connection], Awaitable[T]], attempts: int = 5
    ) -> T:
        """``fn`` on a session of ``project_id``, retried on transient conflicts like a
        transaction (each of its statements commits on its own)."""

        async def once() -> T:
            async with self.session(project_id) as conn:
                return await fn(conn)

        return await retry_transaction(once, attempts)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


# --- the process's pools -------------------------------------------------------------------


@asynccontextmanager
async def bounded(pool: Pool, timeout_s: float, *, transaction: bool) -> AsyncIterator[Connection]:
    """A pool connection (in a transaction if asked) on which every statement must answer
    within ``timeout_s`` (and the connection itself be had within it), whatever the network
    does.

    Why not ``asyncio.timeout`` alone: a cancelled asyncpg statement sends a cancel request on
    a new connection and, inside a transaction, a ROLLBACK; on a black-holed network both wait
    forever too, and so would the pool's release. Instead a timer on the event loop
    *terminates* the connection when no statement has answered for ``timeout_s`` (its socket
    is closed, nothing more is sent): every await on it fails at once with a connection error,
    raised here as DatabaseUnavailableError (E-DB-001). The pool replaces the connection.
    The bound is per statement, not per transaction: a transaction of several statements on a
    slow but working link goes on as long as each one answers in time."""
    loop = asyncio.get_running_loop()
    try:
        conn = await pool.acquire(timeout=timeout_s)
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(
            f"no database connection within {timeout_s:g} s: {exc!r}"
        ) from exc
    expired = False
    released = False  # query-logger callbacks run after the query, possibly after release

    def expire() -> None:
        nonlocal expired
        if not released:
            expired = True
            conn.terminate()

    timer = loop.call_later(timeout_s, expire)

    def answered(_query: object) -> None:
        nonlocal timer
        if not (expired or released):
            timer.cancel()
            timer = loop.call_later(timeout_s, expire)

    conn.add_query_logger(answered)
    try:
        if transaction:
            async with conn.transaction():
                yield conn
        else:
            yield conn
    except Exception as exc:
        if expired:
            raise DatabaseUnavailableError(
                f"a database statement did not answer within {timeout_s:g} s"
            ) from exc
        raise
    finally:
        released = True
        timer.cancel()
        if not expired:
            conn.remove_query_logger(answered)
            await pool.release(conn)


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
    async def open(cls, url: str, max_size: int = 10, run_min_size: int = 0) -> Database:
        """The pools; ``run_min_size`` run-pool connections are opened now and kept open (a
        worker's claims, completions and fenced writes; other processes open none)."""
        pools: list[Pool] = []
        try:
            pools.append(await create_pool(url, APP_ROLE, max_size=max_size))
            pools.append(await create_pool(url, PLATFORM_ROLE, max_size=max_size))
            pools.append(
                await create_pool(
                    url, PLATFORM_ROLE, min_size=run_min_size, max_size=max_size, cached_plans=True
                )
            )
        except BaseException:
            await asyncio.gather(*(pool.close() for pool in pools))
            raise
        tenant_pool, platform_pool, run_pool = pools
        return cls(tenant_pool, platform_pool, run_pool, TenantSessions(url, max_size))

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
        async with self._transaction(self.tenant_pool, timeout_s) as conn:
            await conn.execute(SET_TENANT, project_id)
            yield conn

    @asynccontextmanager
    async def platform(self, *, timeout_s: float | None = None) -> AsyncIterator[Connection]:
        async with self._transaction(self.platform_pool, timeout_s) as conn:
            yield conn

    @staticmethod
    @asynccontextmanager
    async def _transaction(pool: Pool, timeout_s: float | None) -> AsyncIterator[Connection]:
        if timeout_s is not None:
            async with bounded(pool, timeout_s, transaction=True) as conn:
                yield conn
            return
        async with pool.acquire() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def _run_connection(self) -> AsyncIterator[Connection]:
        if self.run_timeout_s is not None:
            async with bounded(self.run_pool, self.run_timeout_s, transaction=False) as conn:
                yield conn
            return
        async with self.run_pool.acquire() as conn:
            yield conn

    async def in_tenant(
        self,
        project_id: str,
        fn: Callable[[Connection], Awaitable[T]],
        attempts: int = 5,
        *,
        timeout_s: float | None = None,
    ) -> T:
        """Run ``fn`` in a tenant transaction, retrying transient conflicts; ``timeout_s``
        bounds each try (:func:`bounded`)."""

        async def once() -> T:
            async with self.tenant(project_id, timeout_s=timeout_s) as conn:
                return await fn(conn)

        return await retry_transaction(once, attempts)

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
        statement run there must keep a good generic plan, see :data:`CACHED_PLAN_SETTINGS`)."""

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
        async def once() -> T:
            async with self.platform(timeout_s=timeout_s) as conn:
                return await fn(conn)

        return await retry_transaction(once, attempts)


@contextlib.contextmanager
def unavailable_on_connection_errors(what: str) -> Iterator[None]:
    """Turn a lost or refused connection into DatabaseUnavailableError (E-DB-001, retryable):
    how the worker tells Postgres being away from a handler's own failure."""
    try:
        yield
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"{what}: {exc!r}") from exc


async def retry_transaction(once: Callable[[], Awaitable[T]], attempts: int = 5) -> T:
    """Retry a whole transaction on serialisation, deadlock and stream-order conflicts."""
    for attempt in range(1, attempts + 1):
        try:
            return await once()
        except RETRYABLE_PG_ERRORS:
            if attempt == attempts:
                raise
            await asyncio.sleep(random.uniform(0, 0.005 * attempt))
    raise AssertionError("unreachable")


def record_to_dict(record: Any) -> dict[str, Any]:
    return dict(record.items())
