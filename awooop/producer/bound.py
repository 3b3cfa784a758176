"""A caller's connection as the producer uses it (what its statements run on, the driver
connection behind it, whether it is inside a transaction the caller ends), and a producer
call run in that transaction or in one of a Database's."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import asyncpg

from awooop.core.db import Connection, Database
from awooop.core.errors import ProducerConnectionError, ProducerTransactionError
from awooop.core.querier import Querier
from awooop.core.retries import unavailable_on_connection_errors

T = TypeVar("T")

ASYNCPG_HINT = "pass a Database, or a connection inside its open transaction (conn.transaction())"


@dataclass(frozen=True)
class Bound:
    conn: Querier  # what the producer's statements run on
    owner: object  # the driver's connection: the key of its configuration cache
    open: bool  # inside a transaction that the caller commits or rolls back
    hint: str  # how to open one, for ProducerTransactionError (E-INGEST-001)


def asyncpg_bound(conn: Connection) -> Bound:
    """An asyncpg connection, or a pool's proxy of one (keyed by the connection behind it: a
    pool hands out a new proxy at each acquire)."""
    return Bound(conn, getattr(conn, "_con", conn), conn.is_in_transaction(), ASYNCPG_HINT)


async def in_transaction(
    target: Database | Bound, project_id: str, run: Callable[[Querier], Awaitable[T]]
) -> T:
    """``run`` in a tenant transaction of the Database (retried on transient conflicts), or
    on the caller's connection inside its open transaction. The database away, refusing
    (read-only, a revoked privilege, disk full) or too slow is raised typed: E-DB-001, E-DB-002,
    E-DB-003 (retryable; the caller's transaction is then aborted and is retried whole)."""
    if isinstance(target, Database):
        with unavailable_on_connection_errors("the producer's write"):
            return await target.in_tenant(project_id, run)
    if not target.open:
        raise ProducerTransactionError(f"the producer needs an open transaction: {target.hint}")
    with producer_errors():
        return await run(target.conn)


@contextlib.contextmanager
def producer_errors() -> Iterator[None]:
    """The database away, refusing or too slow as catalog errors (the psycopg executors turn
    their own); asyncpg's refusal of an argument as E-INGEST-005."""
    try:
        with unavailable_on_connection_errors("the producer's write"):
            yield
    except asyncpg.DataError as exc:
        # asyncpg's own refusal to encode an argument, raised before anything is sent: the
        # events were checked before, so the connection's codecs refused a plain argument.
        if type(exc) is not asyncpg.DataError or not str(exc).startswith(ARGUMENT_REFUSED):
            raise
        raise ProducerConnectionError(
            f"this connection's type codecs refused the producer's argument ({exc}): give the "
            "producer a connection without custom codecs for text, uuid and numbers "
            "(awooop.producer.create_pool, or init=awooop.producer.init_connection)"
        ) from exc


ARGUMENT_REFUSED = "invalid input for query argument"
