"""A caller's connection as the producer uses it: what its statements run on, the driver
connection behind it, and whether it is inside a transaction the caller ends."""

from __future__ import annotations

from dataclasses import dataclass

from awooop.core.db import Connection
from awooop.core.querier import Querier

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
