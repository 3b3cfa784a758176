"""The active-pointer check (R-24): one prepared statement, one round trip.

Each call is ``SELECT * FROM awooop_pointer_check($1, $2, $3, $4)`` (migration 0030) on a
dedicated ``awooop_app`` connection in autocommit mode: the function sets the tenant itself,
so row-level security holds without BEGIN/SET/COMMIT round trips. Several contracts of one
call go in one query (arrays, ``unnest``); the body of the active revision comes back only
for contracts whose cached revision differs, so a miss costs no second round trip either.

Why not the process's asyncpg pool: its release runs a reset query (one more round trip per
use) and its acquire path costs about as much as the query itself. This keeps ``size`` plain
connections (``AWOOOP_POINTER_CHECK_CONNECTIONS``) with the statement prepared once each.
A connection that fails in any way is closed and replaced on next use.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from awooop.db import APP_ROLE, CONNECTION_ERRORS, connect
from awooop.errors import DatabaseUnavailableError

# --- SQL -----------------------------------------------------------------------------------

POINTER_CHECK = (
    "SELECT o_family, o_contract, o_active, o_body, o_body_hash "
    "FROM awooop_pointer_check($1, $2, $3, $4)"
)


# A connection in any of these states is discarded; the statement is read-only, so retrying it
# on a fresh connection is safe.
BROKEN_CONNECTION: tuple[type[BaseException], ...] = (
    *CONNECTION_ERRORS,
    asyncpg.PostgresConnectionError,
    asyncpg.InternalClientError,
)


class Pointer(msgspec.Struct, frozen=True):
    """The DB's answer for one contract: the active revision, and its body when it differs
    from the cached revision that was sent."""

    contract_family: str
    contract_id: str
    active_revision_id: uuid.UUID | None
    body: Any
    body_hash: str | None


class _Conn:
    def __init__(self, conn: Any, statement: Any) -> None:
        self.conn = conn
        self.statement = statement


class PointerChecker:
    def __init__(self, database_url: str, size: int = 2) -> None:
        self.database_url = database_url
        self.size = size
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(size)
        self._closed = False

    async def _open(self) -> _Conn:
        conn = await connect(self.database_url, role=APP_ROLE)
        try:
            statement = await conn.prepare(POINTER_CHECK)
        except BaseException:
            conn.terminate()
            raise
        return _Conn(conn, statement)

    async def warm(self) -> None:
        """Open one connection ahead of the first call."""
        async with self._slots:
            if not self._idle:
                self._idle.append(await self._open())

    async def check(
        self,
        project_id: str,
        contracts: Sequence[tuple[str, str]],
        cached: Sequence[uuid.UUID | None],
    ) -> list[Pointer]:
        """The active pointer of each contract, in order.

        A connection found broken (the server restarted it, a network blip) is replaced and
        the read-only statement tried once more on a fresh one; a second failure is
        E-DB-001."""
        if self._closed:
            raise DatabaseUnavailableError("the pointer checker is closed")
        args = ([c[0] for c in contracts], [c[1] for c in contracts], list(cached))
        async with self._slots:
            for attempt in (1, 2):
                slot = await self._take()
                ok = False
                try:
                    rows = await slot.statement.fetch(project_id, *args)
                    ok = True
                    return [Pointer(*row) for row in rows]
                except BROKEN_CONNECTION as exc:
                    if attempt == 2:
                        raise DatabaseUnavailableError(f"pointer check failed: {exc}") from exc
                finally:
                    if ok and not self._closed:
                        self._idle.append(slot)
                    else:
                        slot.conn.terminate()
        raise AssertionError("unreachable")

    async def _take(self) -> _Conn:
        while self._idle:
            slot = self._idle.pop()
            if not slot.conn.is_closed():
                return slot
        return await self._open()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for slot in idle:
            try:
                await asyncio.wait_for(slot.conn.close(), timeout=2.0)
            except Exception:
                slot.conn.terminate()
