"""The active-pointer check (R-24): one prepared statement, one round trip.

The check runs on ``size`` dedicated ``awooop_app`` connections
(``AWOOOP_POINTER_CHECK_CONNECTIONS``) in autocommit mode, with both statements prepared
once per connection. Each connection keeps the tenant (``awooop.project_id``) at session
level, set when it is first used for a project and changed only when a call is for another
project (one extra round trip then; an idle connection already on the call's project is
preferred), so row-level security holds without BEGIN/SET/COMMIT round trips. These
connections are used only here, and every use sets or checks the project first, so a
forgotten setting cannot leak (the same rule as :class:`awooop.core.sessions.TenantSessions`).

- One contract (every LLM call of the example handler): :data:`POINTER_CHECK_ONE`, a
  primary-key probe of ``awooop_active_revisions``; the active revision's body comes back
  only when it differs from the cached revision (OFFSET 0 keeps the lateral subquery a
  one-time filter, so a cache hit never touches ``awooop_contract_revisions``). No row means
  the contract has no active revision.
- Several contracts of one call: :data:`POINTER_CHECK_MANY`, the same per contract over
  ``unnest`` in one query.

Calls that wait for a connection share their statement: a call joins the check of the same
project, contracts and cached revisions that is still waiting for a connection, and gets its
answer. That check is sent after every call it answers was made, so each of them still sees
every activation committed before it was made; a check already sent answers only the calls
that joined it before. Under load (thousands of runs in flight, each model call checking)
the statements are then as many as the connections can send, not one per call.

Why not the process's asyncpg pool: its release runs a reset query (one more round trip per
use) and its acquire path costs about as much as the query itself. Why not 0030's
``awooop_pointer_check`` function (it sets the tenant transaction-locally on each call):
plpgsql and the two ``set_config`` calls cost about three times the probe itself
(ops/bench/revisions.py). A connection that fails in any way is closed and replaced on next
use.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from awooop.core import metrics
from awooop.core.errors import DatabaseUnavailableError
from awooop.core.logs import get_logger
from awooop.core.pools import APP_ROLE, SET_SESSION_TENANT, connect
from awooop.core.retries import CONNECTION_ERRORS

log = get_logger(__name__)

# --- SQL -----------------------------------------------------------------------------------

# $1 project, $2 family, $3 contract, $4 the cached revision (or NULL).
POINTER_CHECK_ONE = """
SELECT a.active_revision_id, r.body, r.body_hash
FROM awooop_active_revisions a
LEFT JOIN LATERAL (
    SELECT cr.body, cr.body_hash
    FROM awooop_contract_revisions cr
    WHERE cr.revision_id = a.active_revision_id
      AND a.active_revision_id IS DISTINCT FROM $4
    OFFSET 0
) r ON true
WHERE a.project_id = $1 AND a.contract_family = $2 AND a.contract_id = $3
"""

# $1 project, $2 families, $3 contracts, $4 cached revisions: one row per contract, in order.
POINTER_CHECK_MANY = """
SELECT k.family, k.contract, a.active_revision_id, r.body, r.body_hash
FROM unnest($2::text[], $3::text[], $4::uuid[]) WITH ORDINALITY AS k (family, contract, cached, ord)
LEFT JOIN LATERAL (
    SELECT ar.active_revision_id
    FROM awooop_active_revisions ar
    WHERE ar.project_id = $1 AND ar.contract_family = k.family AND ar.contract_id = k.contract
    OFFSET 0
) a ON true
LEFT JOIN LATERAL (
    SELECT cr.body, cr.body_hash
    FROM awooop_contract_revisions cr
    WHERE cr.revision_id = a.active_revision_id
      AND a.active_revision_id IS DISTINCT FROM k.cached
    OFFSET 0
) r ON true
ORDER BY k.ord
"""


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
    def __init__(self, conn: Any, one: Any, many: Any) -> None:
        self.conn = conn
        self.one = one
        self.many = many
        self.project: str | None = None  # the session's awooop.project_id


Key = tuple[str, tuple[tuple[str, str], ...], tuple[uuid.UUID | None, ...]]


class _LeaderGone(Exception):
    """The call that was to send a shared check was cancelled before it answered."""


class _Shared:
    """A check waiting for a connection, and the calls that joined it."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[list[Pointer]] = asyncio.get_running_loop().create_future()
        self.joined = 0


class PointerChecker:
    def __init__(self, database_url: str, size: int = 2) -> None:
        self.database_url = database_url
        self.size = size
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(size)
        self._closed = False
        self._waiting: dict[Key, _Shared] = {}  # checks not sent yet, by what they ask
        self.sent = 0  # checks sent (each answers one call or several)

    async def _open(self) -> _Conn:
        conn = await connect(self.database_url, role=APP_ROLE)
        try:
            one = await conn.prepare(POINTER_CHECK_ONE)
            many = await conn.prepare(POINTER_CHECK_MANY)
        except BaseException as exc:
            conn.terminate()
            if isinstance(exc, BROKEN_CONNECTION):  # the server went away between the two
                raise DatabaseUnavailableError(f"pointer check connection lost: {exc}") from exc
            raise
        return _Conn(conn, one, many)

    async def warm(self) -> None:
        """Open one connection ahead of the first call; if the database is away right now, the
        first call opens it instead (a worker starting during a restart must not die here)."""
        async with self._slots:
            if not self._idle:
                try:
                    self._idle.append(await self._open())
                except DatabaseUnavailableError as exc:
                    log.warning("pointer_check_warm_failed", error=str(exc))

    async def check(
        self,
        project_id: str,
        contracts: Sequence[tuple[str, str]],
        cached: Sequence[uuid.UUID | None],
    ) -> list[Pointer]:
        """The active pointer of each contract, in order.

        A connection found broken (the server restarted it, a network blip) is replaced and
        the read-only statement tried once more on a fresh one; a second failure is
        E-DB-001. A call may share its statement (module doc)."""
        if self._closed:
            raise DatabaseUnavailableError("the pointer checker is closed")
        key: Key = (project_id, tuple(contracts), tuple(cached))
        while True:
            shared = self._waiting.get(key)
            if shared is None:
                return await self._lead(key, project_id, contracts, cached)
            shared.joined += 1
            try:
                return list(await asyncio.shield(shared.answer))
            except _LeaderGone:
                continue  # its caller was cancelled before it was sent: check anew

    async def _lead(
        self,
        key: Key,
        project_id: str,
        contracts: Sequence[tuple[str, str]],
        cached: Sequence[uuid.UUID | None],
    ) -> list[Pointer]:
        """Send the check ``key`` once a connection is free, for this call and those that
        joined it meanwhile."""
        shared = self._waiting[key] = _Shared()
        try:
            async with self._slots:
                del self._waiting[key]  # sent from here on: later calls make their own
                result = await self._send(project_id, contracts, cached)
        except BaseException as exc:
            if self._waiting.get(key) is shared:
                del self._waiting[key]
            gone = isinstance(exc, asyncio.CancelledError)
            if shared.joined:
                shared.answer.set_exception(_LeaderGone() if gone else exc)
                shared.answer.exception()  # retrieved here too, whoever reads it
            raise
        if shared.joined:
            shared.answer.set_result(result)
        return result

    async def _send(
        self,
        project_id: str,
        contracts: Sequence[tuple[str, str]],
        cached: Sequence[uuid.UUID | None],
    ) -> list[Pointer]:
        """The check on a connection of the caller's slot, tried once more on a fresh one."""
        self.sent += 1
        metrics.POINTER_CHECK_STATEMENTS.inc()
        for attempt in (1, 2):
            try:
                slot = await self._take(project_id)
            except DatabaseUnavailableError:
                if attempt == 2:
                    raise
                continue
            ok = False
            try:
                result = await self._check(slot, project_id, contracts, cached)
                ok = True
                return result
            except BROKEN_CONNECTION as exc:
                if attempt == 2:
                    raise DatabaseUnavailableError(f"pointer check failed: {exc}") from exc
            finally:
                if ok and not self._closed:
                    self._idle.append(slot)
                else:
                    slot.conn.terminate()
        raise AssertionError("unreachable")

    @staticmethod
    async def _check(
        slot: _Conn,
        project_id: str,
        contracts: Sequence[tuple[str, str]],
        cached: Sequence[uuid.UUID | None],
    ) -> list[Pointer]:
        if slot.project != project_id:
            slot.project = None  # unknown until the statement has succeeded
            await slot.conn.execute(SET_SESSION_TENANT, project_id)
            slot.project = project_id
        if len(contracts) == 1:
            ((family, contract),) = contracts
            row = await slot.one.fetchrow(project_id, family, contract, cached[0])
            if row is None:
                return [Pointer(family, contract, None, None, None)]
            return [Pointer(family, contract, *row)]
        rows = await slot.many.fetch(
            project_id, [c[0] for c in contracts], [c[1] for c in contracts], list(cached)
        )
        return [Pointer(*row) for row in rows]

    async def _take(self, project_id: str) -> _Conn:
        """An idle connection, preferably one whose session is on ``project_id``."""
        for index in range(len(self._idle) - 1, -1, -1):
            if self._idle[index].project == project_id:
                slot = self._idle.pop(index)
                if not slot.conn.is_closed():
                    return slot
                break
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
