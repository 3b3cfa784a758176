"""A caller's transaction opened with its tenant set, in one round trip
(``awooop.producer.transaction``).

``async with producer.transaction(conn, "shop"):`` is ``async with conn.transaction():``
followed by ``await producer.set_tenant(conn, "shop")``, with one statement less: ``BEGIN`` and
``SET LOCAL awooop.project_id`` (what ``set_tenant``'s transaction-local ``set_config`` does)
go to Postgres as one simple query: two statements, one round trip, where the two steps take
two. On a pool with a connection per transaction that is one of the four round trips of a
producing transaction (``BEGIN``, ``set_tenant``, the ingest statement, ``COMMIT``) and most of
what it costs beside ``submit(db, ...)`` (ops/bench/producer_pool.py, mode
``pool_transaction``).

The project id goes into the text of that query, since a simple query carries no parameters. It
is checked first (:func:`awooop.ingest.credentials.check_project_id`: 1-64 letters, digits and
``_ . : -``), and :func:`tenant_literal` refuses, on its own, anything but those characters
before it quotes it: no quote, backslash or white space can reach the text, and nothing else is
ever interpolated. The guards are those of ``set_tenant``, unchanged: the setting is the
transaction's tenant, row-level security and the ingest statement's guard check it and the
login's binding on every statement, so a producer login bound to one project writes nothing of
another whatever it sets, and a refusal (E-INGEST-003, raised before anything is written)
leaves the transaction usable.

The block commits when it ends and rolls back when it raises, as ``conn.transaction()`` does
(and, like it, a COMMIT of a transaction a caught error aborted is a rollback). asyncpg only:
the connection must not be in a transaction already (E-INGEST-001; inside one, call
``set_tenant``), and asyncpg's own ``conn.transaction()`` cannot be nested in the block (it
refuses a transaction it did not start: use ``SAVEPOINT`` statements there). Other drivers open
their transaction and call ``set_tenant`` (E-INGEST-005 names that).
"""

from __future__ import annotations

import re
from typing import NoReturn

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from awooop.core.db import Connection
from awooop.core.errors import (
    InvalidInputError,
    ProducerConnectionError,
    ProducerTransactionError,
)
from awooop.ingest.credentials import check_project_id
from awooop.producer.bound import producer_errors

# The statements, by isolation level (None: the session's default, as conn.transaction()).
# {tenant} is tenant_literal(project_id), the only text ever put in.
# SET LOCAL is set_config(..., true) as a utility statement: Postgres plans nothing for it,
# where a SELECT sent as a simple query is parsed and planned again on every call.
BEGIN_TENANT = "{begin}; SET LOCAL awooop.project_id = {tenant}"
BEGIN = {
    None: "BEGIN",
    "read_committed": "BEGIN ISOLATION LEVEL READ COMMITTED",
    "repeatable_read": "BEGIN ISOLATION LEVEL REPEATABLE READ",
    "serializable": "BEGIN ISOLATION LEVEL SERIALIZABLE",
}
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"


# What tenant_literal lets into a query, whatever check_project_id allows: characters a
# string literal never has to escape.
PLAIN = re.compile(r"[A-Za-z0-9_.:-]+")


def tenant_literal(project_id: str) -> str:
    """Pure: ``project_id`` as an SQL string literal, refused unless it is made of
    :data:`PLAIN` characters only (a valid project id always is)."""
    if not PLAIN.fullmatch(project_id):
        raise InvalidInputError("project id is not plain text", project_id=project_id[:80])
    return f"'{project_id}'"


def begin_tenant(project_id: str, isolation: str | None = None) -> str:
    """Pure: the one query that opens the transaction and sets its tenant; ``project_id``
    checked as everywhere (:func:`check_project_id`) and quoted by :func:`tenant_literal`."""
    check_project_id(project_id)
    if isolation not in BEGIN:
        choices = ", ".join(str(k) for k in BEGIN)
        raise InvalidInputError(f"isolation must be one of {choices}", isolation=str(isolation))
    return BEGIN_TENANT.format(begin=BEGIN[isolation], tenant=tenant_literal(project_id))


class TenantTransaction:
    """``async with producer.transaction(conn, project_id):`` (see the module docstring).
    A class rather than a generator: this sits on every producing transaction's path, where
    each microsecond of the client counts (ops/bench/producer_pool.py)."""

    __slots__ = ("_conn", "_query")

    def __init__(self, conn: Connection, query: str) -> None:
        self._conn = conn
        self._query = query

    async def __aenter__(self) -> Connection:
        conn = self._conn
        if conn.is_in_transaction():
            raise ProducerTransactionError(
                "producer.transaction opens the transaction itself: this connection is in "
                "one already, call producer.set_tenant in it"
            )
        try:
            await conn.execute(self._query)
        except BaseException as exc:
            await _rollback(conn)  # the BEGIN may have run without the SET LOCAL
            _raise_typed(exc)
        return conn

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            await _rollback(self._conn)
            return  # the block's exception goes on
        try:
            await self._conn.execute(COMMIT)
        except BaseException as exc:
            _raise_typed(exc)


def transaction(
    conn: Connection, project_id: str, *, isolation: str | None = None
) -> TenantTransaction:
    """Open a transaction on ``conn`` with ``awooop.project_id`` set to ``project_id``, in
    one round trip; commit when the block ends, roll back when it raises. See the module
    docstring. ``project_id`` and ``isolation`` are checked here, before anything is sent."""
    query = begin_tenant(project_id, isolation)
    if not isinstance(conn, asyncpg.Connection | PoolConnectionProxy):
        raise ProducerConnectionError(
            "producer.transaction takes an asyncpg connection: with another driver, open "
            "the transaction and call producer.set_tenant in it"
        )
    return TenantTransaction(conn, query)


def _raise_typed(exc: BaseException) -> NoReturn:
    """Raise ``exc`` as the producer's other calls raise it (:func:`producer_errors`: the
    database away, refusing or too slow as E-DB-001/2/3); translated only once raised, so the
    path that raises nothing pays nothing for it."""
    with producer_errors():
        raise exc
    raise AssertionError("unreachable")  # producer_errors re-raises whatever it is given


async def _rollback(conn: Connection) -> None:
    """End the transaction, if the connection still has one, as the block's exception goes
    on. Should the ROLLBACK fail (the connection broken, or busy with a cancelled
    statement), the connection is closed instead: its transaction's state is unknown, so it
    serves nothing more (a pool replaces it), and the block's own exception is the one
    raised."""
    if conn.is_closed() or not conn.is_in_transaction():
        return
    try:
        await conn.execute(ROLLBACK)
    except Exception:
        conn.terminate()
