"""An example service on psycopg 3 (docs/consumers.md, The example service: orders): it places
orders in its own transaction, emitting the domain events ``OrderPlaced`` and
``OrderCancelled`` with the producer library, and keeps a read model of them, the projection
:class:`OrderTotals` (orders and their total per customer).

The service's code, on its own login bound to its projects (``awooop tenants grant``)::

    async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
        placed = await place_order(conn, "shop", Order("o-1", "ann", 1250))
        ...  # the service's other writes: all of them commit, or none

The order's row (``example_orders``) and its event commit or roll back together with the
caller's transaction. The row's primary key is the dedupe key: placing an order again (a
retried request) writes nothing and emits nothing (``placed`` is False; the first placement
stands). Each customer's events go to the stream ``orders-<customer>``, in order; should
another transaction emit to that stream after this one began writing, the emit raises
E-EVENT-002 (``StreamOrderConflictError``, retryable): retry the transaction. Install the
driver with ``pip install 'awooop[psycopg]'``; this module imports psycopg only inside the
functions that take a connection, so the runtime's processes load the projection without it.

The tables are the service's migration (``orders.sql`` beside this file, :func:`schema`). Run
the projection beside the built-in ones, and rebuild it::

    awooop projector --projection awooop.examples.orders:OrderTotals
    awooop replay order_totals --projection awooop.examples.orders:OrderTotals --verify

``awooop demo`` runs this service and its projection (awooop/demo/orders_phase.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

import msgspec

from awooop import producer
from awooop.consumer import Projection, Record
from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError

if TYPE_CHECKING:
    import psycopg

NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")  # fits a domain stream's name: orders-<customer>
MAX_AMOUNT = 10**12  # in cents

# --- SQL: the service's statements (psycopg, %s) and the projection's (asyncpg, $n) ----------
PLACE = """
INSERT INTO example_orders (project_id, order_id, customer, amount) VALUES (%s, %s, %s, %s)
ON CONFLICT (project_id, order_id) DO NOTHING
"""
CANCEL = """
UPDATE example_orders SET cancelled = true
WHERE project_id = %s AND order_id = %s AND NOT cancelled
RETURNING customer, amount
"""
# {table} is the live table or the replay's shadow.
ADD = """
INSERT INTO {table} AS t (project_id, customer, orders, total, last_order)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (project_id, customer) DO UPDATE
SET orders = t.orders + EXCLUDED.orders, total = t.total + EXCLUDED.total,
    last_order = coalesce(EXCLUDED.last_order, t.last_order)
"""


class Order(msgspec.Struct, frozen=True):
    order_id: str  # the dedupe key within the project
    customer: str
    amount: int  # in cents, more than 0


def schema() -> str:
    """The service's migration: its tables (``orders.sql``), run as the database's owner."""
    return (resources.files(__package__) / "orders.sql").read_text(encoding="utf-8")


def check_order(order: Order) -> None:
    """Pure: InvalidInputError (E-INPUT-001) naming what is wrong with ``order``."""
    for field in ("order_id", "customer"):
        value = getattr(order, field)
        if not isinstance(value, str) or not NAME.fullmatch(value):
            raise InvalidInputError(
                f"an order's {field} is 1-100 letters, digits and _ . : - (got {value!r})"
            )
    amount = order.amount
    if not isinstance(amount, int) or isinstance(amount, bool) or not 0 < amount <= MAX_AMOUNT:
        raise InvalidInputError(f"an order's amount is 1 to {MAX_AMOUNT} cents (got {amount!r})")


def event(event_type: str, order: Order) -> producer.DomainEvent:
    data = {"order": order.order_id, "customer": order.customer, "amount": order.amount}
    return producer.DomainEvent(f"orders-{order.customer}", event_type, data)


async def place_order(conn: psycopg.AsyncConnection[Any], project: str, order: Order) -> bool:
    """In the caller's transaction on ``conn``: set its tenant to ``project``, write the order's
    row and emit ``OrderPlaced``. False, with nothing written, when the project has the order
    already. A bad order is refused (E-INPUT-001) before anything is written."""
    check_order(order)
    await producer.set_tenant(conn, project)
    cursor = await conn.execute(PLACE, (project, order.order_id, order.customer, order.amount))
    if cursor.rowcount == 0:
        return False
    await producer.emit(conn, project, event("OrderPlaced", order))
    return True


async def cancel_order(conn: psycopg.AsyncConnection[Any], project: str, order_id: str) -> bool:
    """In the caller's transaction: mark the order cancelled and emit ``OrderCancelled``.
    False, with nothing written, when the project has no such order or it is cancelled."""
    from psycopg.rows import tuple_row  # the caller's connection keeps its own row factory

    await producer.set_tenant(conn, project)
    async with conn.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(CANCEL, (project, order_id))
        row = await cursor.fetchone()
    if row is None:
        return False
    customer, amount = row
    await producer.emit(conn, project, event("OrderCancelled", Order(order_id, customer, amount)))
    return True


class OrderTotals(Projection):
    """Orders placed and not cancelled, their total, and the latest order, per customer."""

    name = "order_totals"
    event_types = frozenset({"OrderPlaced", "OrderCancelled"})
    table = "example_order_totals"
    key = ("project_id", "customer")
    description = "orders and their total per customer"

    async def apply(self, conn: Connection, table: str, records: Sequence[Record]) -> None:
        changes = []
        for r in records:
            placed = r.event_type == "OrderPlaced"
            sign = 1 if placed else -1
            latest = r.data["order"] if placed else None
            changes.append(
                (r.project_id, r.data["customer"], sign, sign * int(r.data["amount"]), latest)
            )
        await conn.executemany(ADD.format(table=table), changes)  # one round trip
