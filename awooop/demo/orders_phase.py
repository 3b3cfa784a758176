"""The demo's orders phase: the example service awooop/examples/orders.py places orders from
psycopg 3, on a login of its own bound to the demo project (``awooop tenants grant``), each in
a transaction of its own; its projection ``order_totals`` runs in the demo's projector process
(``--projection awooop.examples.orders:OrderTotals``).

Each order of :data:`ORDERS` is placed, those of :data:`RETRIED` twice (a retried request:
the second placement writes nothing); one more order is placed in a transaction that then
rolls back, and one order is cancelled. The check reads the service's rows and the log's
events (each order's event once, nothing of the rolled-back one), waits until the projection's
table holds the totals folded from :data:`ORDERS` here, and runs ``awooop replay order_totals
--verify``, which must find no difference.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import TYPE_CHECKING, Any

import asyncpg

from awooop.demo.provision import login
from awooop.demo.stage import PROJECT, Stage, say
from awooop.examples import orders
from awooop.examples.orders import Order, cancel_order, place_order

if TYPE_CHECKING:
    import psycopg

SOURCE = "awooop.examples.orders:OrderTotals"
SERVICE_ROLE = "awooop_demo_shop"
ORDERS = (
    Order("A-1", "ann", 1250),
    Order("A-2", "ann", 800),
    Order("B-1", "bob", 4200),
    Order("C-1", "cy", 999),
    Order("C-2", "cy", 150),
)
RETRIED = ("A-1", "B-1")
ROLLED_BACK = Order("R-1", "ann", 5000)
CANCELLED = "C-2"
INSTALL = "psycopg is not installed: pip install 'awooop[psycopg]' (make install does)"

# --- SQL (observation only; the demo changes nothing behind the runtime's back) -------------
ORDER_ROWS = """
SELECT order_id, cancelled FROM example_orders WHERE project_id = $1 ORDER BY order_id
"""
ORDER_EVENTS = """
SELECT event_type, data->>'order' AS order_id FROM awooop_events
WHERE stream_id LIKE $1 AND event_type IN ('OrderPlaced', 'OrderCancelled')
"""
TOTALS = """
SELECT customer, orders, total FROM example_order_totals WHERE project_id = $1 ORDER BY customer
"""


def expected_totals() -> list[tuple[str, int, int]]:
    """Pure: (customer, orders, total) of :data:`ORDERS` once each, the cancelled one out."""
    count: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for order in ORDERS:
        if order.order_id != CANCELLED:
            count[order.customer] += 1
            total[order.customer] += order.amount
    customers = sorted({order.customer for order in ORDERS})
    return [(c, count[c], total[c]) for c in customers]


def psycopg_missing() -> bool:
    """Whether the optional driver (``awooop[psycopg]``) is missing from this environment."""
    return importlib.util.find_spec("psycopg") is None


class OrdersPhase(Stage):
    service_url = ""

    async def prepare_orders(self) -> None:
        """The service's migration (its tables), as the owner, and its login, bound to the
        demo project; before the projector starts, which checks the projection's table."""
        conn = await asyncpg.connect(self.where.database_url)
        try:
            await conn.execute(orders.schema())
        finally:
            await conn.close()
        self.service_url = await login(self.where.database_url, SERVICE_ROLE)
        owner = {"AWOOOP_DATABASE_URL": self.where.database_url}
        await self.cli("tenants", "grant", SERVICE_ROLE, PROJECT, env=owner)
        say(
            f"the orders service's tables in place (awooop/examples/orders.sql), its login "
            f"{SERVICE_ROLE} bound to project {PROJECT}"
        )

    async def orders_phase(self) -> None:
        say("phase 6 (beside 4 and 5): a psycopg service places orders; projection order_totals")
        if psycopg_missing():
            self.summary.orders_skipped = INSTALL
            say(f"phase 6 skipped: {INSTALL}")
            return
        placed, repeats = await self.place_orders()
        say(
            f"{SERVICE_ROLE} placed {placed} orders from psycopg, {repeats} retries were no-ops, "
            f"{ROLLED_BACK.order_id} rolled back, {CANCELLED} cancelled"
        )
        expected = expected_totals()

        async def built() -> bool:
            return [tuple(r) for r in await self.fetch(TOTALS, PROJECT)] == expected

        await self.wait_for("the projection order_totals", built, limit_s=60)
        owner = {"AWOOOP_DATABASE_URL": self.where.database_url}  # replay builds shadow tables
        code, out, err = await self.procs.run(
            "replay", "order_totals", "--projection", SOURCE, "--verify", env=owner
        )
        problems = await self.check_orders(placed, repeats)
        if code != 0 or "verify: no difference" not in out:
            problems.append(f"replay order_totals --verify: exit {code} {(out + err)[-300:]}")
        self.summary.orders_problems = problems
        self.summary.orders = (
            f"{len(expected)} customers' totals equal the orders placed "
            f"({', '.join(f'{c} {n} for {t / 100:.2f}' for c, n, t in expected)}); "
            f"replay --verify exit {code}"
        )
        say(f"  orders: {self.summary.orders}")

    async def place_orders(self) -> tuple[int, int]:
        """The service's transactions; (orders placed, placements that were no-ops)."""
        import psycopg

        placed = repeats = 0
        retries = [o for o in ORDERS if o.order_id in RETRIED]
        async with await psycopg.AsyncConnection.connect(self.service_url, autocommit=True) as conn:
            for order in (*ORDERS, *retries):
                async with conn.transaction():
                    if await place_order(conn, PROJECT, order):
                        placed += 1
                    else:
                        repeats += 1
            await self.refused_payment(conn)
            async with conn.transaction():
                await cancel_order(conn, PROJECT, CANCELLED)
        return placed, repeats

    async def refused_payment(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A placement whose transaction then rolls back (the payment was refused, say):
        nothing of it stays, neither its row nor its event."""
        import psycopg

        async with conn.transaction():
            await place_order(conn, PROJECT, ROLLED_BACK)
            raise psycopg.Rollback()

    async def check_orders(self, placed: int, repeats: int) -> list[str]:
        """What the service's transactions left: its rows and the events, each order's once."""
        rows = {r["order_id"]: r["cancelled"] for r in await self.fetch(ORDER_ROWS, PROJECT)}
        events = await self.fetch(ORDER_EVENTS, f"domain/{PROJECT}/orders-%")
        seen = Counter((e["event_type"], e["order_id"]) for e in events)
        wanted = Counter({("OrderPlaced", o.order_id): 1 for o in ORDERS})
        wanted["OrderCancelled", CANCELLED] = 1
        expected = {
            "every order placed once": placed == len(ORDERS) and repeats == len(RETRIED),
            "the service's rows": rows == {o.order_id: o.order_id == CANCELLED for o in ORDERS},
            "one event per placement and cancellation": seen == wanted,
        }
        return [f"orders: not {what}" for what, ok in expected.items() if not ok]
