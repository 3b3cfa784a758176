"""Tenant connections used outside transactions, whose session carries the project.

See :class:`TenantSessions` for why (round trips) and how the row-level-security guard is kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import asyncpg

from awooop.core.errors import DatabaseBusyError, DatabaseUnavailableError
from awooop.core.pools import (
    APP_ROLE,
    CACHED_PLAN_SETTINGS,
    SERVER_CHECKS,
    SET_SESSION_TENANT,
    Connection,
    Pool,
    drop_if_poisoned,
    init_connection,
    server_bound,
)
from awooop.core.retries import (
    CONNECTION_ERRORS,
    retry_transaction,
    unavailable_on_connection_errors,
)

T = TypeVar("T")

CLIENT_MARGIN_S = 1.0


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
    :func:`awooop.producer.submit` with a ``Database`` (``Database.sessions``).

    The guard that a forgotten setting shows no rows is kept by construction: these
    connections are used only through :meth:`session`, which sets (or checks) the project
    before handing a connection out, and no other code acquires from this pool.
    """

    def __init__(self, url: str, max_size: int, bound_s: float | None = None) -> None:
        self.url = url
        self.max_size = max_size
        # The bound of each statement on the server (statement and lock timeouts) and of each
        # call of run() on the client: an ingest behind a lock answers E-DB-003 in time.
        self.bound_s = bound_s
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
                        server_settings={
                            "role": APP_ROLE,
                            **CACHED_PLAN_SETTINGS,
                            **SERVER_CHECKS,
                            **(server_bound(self.bound_s) if self.bound_s else {}),
                        },
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
                with drop_if_poisoned(conn):
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

        if self.bound_s is None:
            return await retry_transaction(once, attempts)
        try:
            # The server's own bound fires first; this one covers a network that hangs.
            async with asyncio.timeout(self.bound_s + CLIENT_MARGIN_S):
                return await retry_transaction(once, attempts)
        except TimeoutError as exc:
            raise DatabaseBusyError(
                f"the database did not answer within {self.bound_s:g} s"
            ) from exc

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
