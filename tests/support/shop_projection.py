"""The example service's projection (awooop/examples/orders.py: order totals per customer,
from the domain events ``OrderPlaced`` and ``OrderCancelled``) fed by a shop that emits those
events with ``awooop.producer.emit`` for many projects and customers, and knows the totals
they must add up to; its tables are the example's (:data:`TABLE_SQL`, the service's
migration). Registered in tests as ``awooop.examples.orders:OrderTotals``.

Run as ``python -m tests.support.shop_projection`` it is a service's consumer process
(``awooop.consumer.Consumer``) that stops inside ``apply`` at the order ``BLOCK_ON_ORDER``
names (printing ``blocked``), for the tests that kill it there.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import asyncpg

from awooop import producer
from awooop.consumer import Consumer, Record
from awooop.core.db import Connection, Database
from awooop.examples import orders
from awooop.examples.orders import Order, OrderTotals

TABLE = OrderTotals.table
TABLE_SQL = orders.schema()  # the example service's tables: its orders and OrderTotals' view


class BlockingOrderTotals(OrderTotals):
    """Stops for good inside ``apply`` at the order ``BLOCK_ON_ORDER`` names."""

    async def apply(self, conn: Connection, table: str, records: Sequence[Record]) -> None:
        if any(r.data.get("order") == os.environ.get("BLOCK_ON_ORDER") for r in records):
            print("blocked", flush=True)
            await asyncio.Event().wait()
        await super().apply(conn, table, records)


class Shop:
    """Emits orders of customers in some projects and knows the totals they must add up to."""

    def __init__(self, db: Database, seed: int) -> None:
        self.db = db
        self.random = random.Random(seed)
        self.seed = seed
        self.orders: Counter[tuple[str, str]] = Counter()
        self.totals: Counter[tuple[str, str]] = Counter()
        self.placed: list[tuple[str, str, str, int]] = []  # project, customer, order, amount
        self.count = 0

    async def place(self, project: str, customer: str, amount: int, order: str = "") -> str:
        self.count += 1
        order = order or f"o{self.seed}-{self.count}"
        event = orders.event("OrderPlaced", Order(order, customer, amount))
        await producer.emit(self.db, project, event)
        self.orders[project, customer] += 1
        self.totals[project, customer] += amount
        self.placed.append((project, customer, order, amount))
        return order

    async def cancel_one(self) -> None:
        project, customer, order, amount = self.placed.pop(self.random.randrange(len(self.placed)))
        event = orders.event("OrderCancelled", Order(order, customer, amount))
        await producer.emit(self.db, project, event)
        self.orders[project, customer] -= 1
        self.totals[project, customer] -= amount

    async def noise(self, project: str) -> None:
        """An event of a type the projection does not handle, in a stream it follows."""
        await producer.emit(
            self.db, project, producer.DomainEvent("invoices", "InvoiceSent", {"n": self.count})
        )

    async def run(self, events: int, projects: Sequence[str] = ("shop", "bakery")) -> None:
        for _ in range(events):
            roll = self.random.random()
            project = self.random.choice(projects)
            if roll < 0.15 and self.placed:
                await self.cancel_one()
            elif roll < 0.25:
                await self.noise(project)
            else:
                customer = self.random.choice(["ann", "bob", "cy", "dee"])
                await self.place(project, customer, self.random.randint(1, 500))

    def expected(self) -> list[tuple[Any, ...]]:
        return sorted(
            (project, customer, self.orders[project, customer], self.totals[project, customer])
            for project, customer in self.orders
        )


async def view(db: Database) -> list[tuple[Any, ...]]:
    async with db.platform() as conn:
        rows = await conn.fetch(
            f"SELECT project_id, customer, orders, total FROM {TABLE} ORDER BY 1, 2"
        )
    return [tuple(r) for r in rows]


async def create_table(database_url: str, sql: str = TABLE_SQL) -> None:
    """What the service's migration does (as the database's owner)."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main() -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("started", flush=True)
    await Consumer(BlockingOrderTotals(), name=os.environ.get("CONSUMER_NAME")).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
