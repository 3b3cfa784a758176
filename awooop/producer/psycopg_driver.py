"""The producer's executors on psycopg 3 connections, async and sync (``awooop[psycopg]``).

Each statement runs on a cursor of its own with its own row factory (the connection's is left
alone), its ``$n`` parameters passed by name (:mod:`awooop.producer.placeholders`); every JSON
argument is text, so the connection needs no JSON adapter; where the connection's adapters for
the plain types are the service's own, psycopg's are put on the producer's cursors
(:mod:`awooop.producer.psycopg_adapters`), the connection's left alone. A psycopg connection
that is not in autocommit begins a transaction at its first statement: the producer's
statements then belong to the transaction the caller commits (or rolls back). In autocommit
mode outside ``conn.transaction()`` each statement would commit on its own, so the producer
refuses it (E-INGEST-001).

:class:`Sync` runs a sync connection's statements from coroutines that never suspend, so the
one async core drives it (:func:`awooop.producer.sync.drive`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import AdaptersMap
from psycopg.rows import dict_row, tuple_row

from awooop.core.errors import ProducerConnectionError
from awooop.producer.bound import Bound
from awooop.producer.driver_errors import unavailable_on_driver_errors
from awooop.producer.placeholders import statement
from awooop.producer.psycopg_adapters import differences, install

WHAT = "the producer's write"


def in_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether the producer's statements would be part of a transaction the caller ends."""
    status = conn.info.transaction_status
    if status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
        return True
    return not conn.autocommit and status in (
        pq.TransactionStatus.IDLE,
        pq.TransactionStatus.ACTIVE,
    )


def first_value(row: dict[str, Any] | None) -> Any:
    return None if row is None else next(iter(row.values()), None)


class Async:
    """A :class:`~awooop.core.querier.Querier` on a ``psycopg.AsyncConnection``."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.fixes = differences(conn.adapters)

    async def _run(self, query: str, args: Sequence[Any]) -> tuple[list[dict[str, Any]], str]:
        sql, params = statement(query, args)
        with unavailable_on_driver_errors(WHAT):
            async with psycopg.AsyncCursor(self.conn, row_factory=dict_row) as cur:
                install(cur, self.fixes)
                await cur.execute(sql, params)
                rows = await cur.fetchall() if cur.description is not None else []
                return rows, cur.statusmessage or ""

    async def fetch(self, query: str, *args: Any) -> list[dict[str, Any]]:
        return (await self._run(query, args))[0]

    async def fetchrow(self, query: str, *args: Any) -> dict[str, Any] | None:
        rows = (await self._run(query, args))[0]
        return rows[0] if rows else None

    async def fetchval(self, query: str, *args: Any) -> Any:
        return first_value(await self.fetchrow(query, *args))

    async def execute(self, query: str, *args: Any) -> str:
        return (await self._run(query, args))[1]


class Sync:
    """A :class:`~awooop.core.querier.Querier` on a sync ``psycopg.Connection`` (or any
    DB-API cursor factory that takes ``%(name)s`` parameters, as Django's connection):
    its coroutines run the statement at once and never suspend."""

    def __init__(self, cursor: Any, adapters: AdaptersMap) -> None:
        self.cursor = cursor  # () -> a context manager of a cursor
        self.fixes = differences(adapters)  # adapters: the connection's

    def _run(self, query: str, args: Sequence[Any]) -> tuple[list[dict[str, Any]], str]:
        sql, params = statement(query, args)
        with unavailable_on_driver_errors(WHAT), self.cursor() as cur:
            install(cur, self.fixes)
            cur.execute(sql, params)
            if cur.description is None:
                return [], getattr(cur, "statusmessage", None) or ""
            names = [column.name for column in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
            return rows, getattr(cur, "statusmessage", None) or ""

    async def fetch(self, query: str, *args: Any) -> list[dict[str, Any]]:
        return self._run(query, args)[0]

    async def fetchrow(self, query: str, *args: Any) -> dict[str, Any] | None:
        rows = self._run(query, args)[0]
        return rows[0] if rows else None

    async def fetchval(self, query: str, *args: Any) -> Any:
        return first_value(await self.fetchrow(query, *args))

    async def execute(self, query: str, *args: Any) -> str:
        return self._run(query, args)[1]


def sync_cursor(conn: psycopg.Connection[Any]) -> Any:
    """A cursor factory for :class:`Sync`: tuple rows, the connection's row factory aside."""
    return lambda: psycopg.Cursor(conn, row_factory=tuple_row)


HINT = (
    "open one first: conn.transaction(), or a connection that is not in autocommit mode "
    "(its first statement begins the transaction you commit)"
)


def bound_async(conn: object, hint: str = HINT) -> Bound:
    if not isinstance(conn, psycopg.AsyncConnection):
        raise ProducerConnectionError(
            f"a sync psycopg connection ({type(conn).__name__}): use awooop.producer.sync"
        )
    return Bound(Async(conn), conn, in_transaction(conn), hint)


def bound_sync(conn: object, hint: str = HINT) -> Bound:
    if not isinstance(conn, psycopg.Connection):
        raise ProducerConnectionError(
            f"an async psycopg connection ({type(conn).__name__}): use awooop.producer (async)"
        )
    return Bound(Sync(sync_cursor(conn), conn.adapters), conn, in_transaction(conn), hint)
