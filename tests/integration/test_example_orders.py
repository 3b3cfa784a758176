"""The example service awooop/examples/orders.py (docs/consumers.md, The example service:
orders): orders placed from psycopg 3 in the service's own transaction, on a login bound to its
projects; its projection OrderTotals built from their events and rebuilt by the replay."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import psycopg
import pytest

from awooop.consumer import Consumer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError
from awooop.examples.orders import Order, OrderTotals, cancel_order, place_order
from awooop.projections.registered import registered
from awooop.projections.replay import replay
from awooop.services import Services
from awooop.streams.relay import Relay
from tests.support import shop_projection
from tests.support.logins import Login, bound_login
from tests.support.waiting import eventually

SOURCE = "awooop.examples.orders:OrderTotals"
PROJECTS = ["shop", "bakery"]

# What the service's transactions left, and the view: the example's tables, read as the owner.
ROWS = "SELECT project_id, order_id, customer, amount, cancelled FROM example_orders ORDER BY 1, 2"
EVENTS = """
SELECT project_id, stream_id, event_type, data->>'order' AS order_id FROM awooop_events
WHERE event_type IN ('OrderPlaced', 'OrderCancelled') ORDER BY position
"""
VIEW = """
SELECT project_id, customer, orders, total, last_order FROM example_order_totals ORDER BY 1, 2
"""
FROM_ROWS = """
SELECT project_id, customer, count(*) FILTER (WHERE NOT cancelled)::int,
       coalesce(sum(amount) FILTER (WHERE NOT cancelled), 0)::bigint
FROM example_orders GROUP BY 1, 2 ORDER BY 1, 2
"""


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[Login]:
    """The example's tables (the service's migration) and its login, bound to PROJECTS."""
    await shop_projection.create_table(database_url)
    async with bound_login(database_url, PROJECTS) as login:
        yield login


@pytest.fixture
async def conn(service: Login) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(service.url, autocommit=True) as conn:
        yield conn


async def read(db: Database, query: str) -> list[tuple[Any, ...]]:
    async with db.platform() as c:
        return [tuple(r) for r in await c.fetch(query)]


async def test_an_order_commits_and_rolls_back_with_the_callers_transaction(
    db: Database, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with conn.transaction():
        assert await place_order(conn, "shop", Order("o-1", "ann", 500))
        assert await place_order(conn, "shop", Order("o-2", "bob", 700))
        raise psycopg.Rollback  # the caller fails after placing: its transaction rolls back
    assert await read(db, ROWS) == []
    assert await read(db, EVENTS) == []
    # the same orders again, committed this time: the rollback left no dedupe key behind
    async with conn.transaction():
        assert await place_order(conn, "shop", Order("o-1", "ann", 500))
        assert await place_order(conn, "shop", Order("o-2", "bob", 700))
    assert await read(db, ROWS) == [
        ("shop", "o-1", "ann", 500, False),
        ("shop", "o-2", "bob", 700, False),
    ]
    assert await read(db, EVENTS) == [
        ("shop", "domain/shop/orders-ann", "OrderPlaced", "o-1"),
        ("shop", "domain/shop/orders-bob", "OrderPlaced", "o-2"),
    ]
    async with conn.transaction():
        assert await cancel_order(conn, "shop", "o-1")
        raise psycopg.Rollback
    assert ("shop", "o-1", "ann", 500, False) in await read(db, ROWS)
    assert len(await read(db, EVENTS)) == 2


async def test_placing_or_cancelling_an_order_again_writes_nothing(
    db: Database, database_url: str, conn: psycopg.AsyncConnection[Any], service: Login
) -> None:
    order = Order("o-1", "ann", 500)
    async with conn.transaction():
        assert await place_order(conn, "shop", order)
    async with conn.transaction():
        assert not await place_order(conn, "shop", order)  # a retried request
        assert not await place_order(conn, "shop", Order("o-1", "ann", 999))  # the first stands
    async with conn.transaction():
        assert await place_order(conn, "bakery", order)  # the key is per project
    # A retry racing the first placement: it waits for the first transaction's row, then
    # finds it and writes nothing.
    async with await psycopg.AsyncConnection.connect(service.url, autocommit=True) as other:
        async with conn.transaction():
            assert await place_order(conn, "shop", Order("o-2", "ann", 300))
            racing = asyncio.create_task(retry(other, Order("o-2", "ann", 300)))
            await eventually(
                lambda: waiting_on_a_lock(database_url, service.role), what="the retry waits"
            )
            assert not racing.done()
        assert await racing is False
    async with conn.transaction():
        assert await cancel_order(conn, "shop", "o-1")
        assert not await cancel_order(conn, "shop", "o-1")  # cancelled already
        assert not await cancel_order(conn, "shop", "no-such-order")
    events = Counter((p, t, o) for p, _, t, o in await read(db, EVENTS))
    assert events == {
        ("shop", "OrderPlaced", "o-1"): 1,
        ("bakery", "OrderPlaced", "o-1"): 1,
        ("shop", "OrderPlaced", "o-2"): 1,
        ("shop", "OrderCancelled", "o-1"): 1,
    }


async def retry(conn: psycopg.AsyncConnection[Any], order: Order) -> bool:
    async with conn.transaction():
        return await place_order(conn, "shop", order)


async def waiting_on_a_lock(database_url: str, role: str) -> bool:
    """Whether a session of ``role`` waits for a lock (as the owner, who sees every session's
    wait)."""
    owner = await asyncpg.connect(database_url)
    try:
        return bool(
            await owner.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 "
                "AND wait_event_type = 'Lock'",
                role,
            )
        )
    finally:
        await owner.close()


@pytest.mark.parametrize(
    ("order", "says"),
    [
        (Order("o 1", "ann", 500), "order_id"),
        (Order("o-1", "ann@example.com", 500), "customer"),
        (Order("o-1", "", 500), "customer"),
        (Order("o-1", "ann", 0), "amount"),
        (Order("o-1", "ann", True), "amount"),
        (Order("o-1", "ann", 10**13), "amount"),
    ],
)
async def test_a_bad_order_is_refused_with_its_code_and_writes_nothing(
    db: Database, conn: psycopg.AsyncConnection[Any], order: Order, says: str
) -> None:
    async with conn.transaction():
        with pytest.raises(InvalidInputError) as raised:
            await place_order(conn, "shop", order)
        assert raised.value.code == "E-INPUT-001"
        assert says in str(raised.value)
        assert await place_order(conn, "shop", Order("o-2", "bob", 100))  # the transaction goes on
    assert [r[1] for r in await read(db, ROWS)] == ["o-2"]


@pytest.mark.connections(11)
async def test_the_projection_equals_the_fold_of_the_orders_and_replay_verifies_it(
    services: Services,
    settings: Settings,
    db: Database,
    database_url: str,
    conn: psycopg.AsyncConnection[Any],
) -> None:
    placed = [
        ("shop", Order("s-1", "ann", 1250)),
        ("shop", Order("s-2", "ann", 800)),
        ("shop", Order("s-3", "bob", 4200)),
        ("bakery", Order("b-1", "ann", 300)),
        ("bakery", Order("b-2", "cy", 999)),
        ("shop", Order("s-1", "ann", 1250)),  # retried
    ]
    cancelled = [("shop", "s-2"), ("bakery", "b-2")]
    for project, order in placed:
        async with conn.transaction():
            await place_order(conn, project, order)
    for project, order_id in cancelled:
        async with conn.transaction():
            await cancel_order(conn, project, order_id)
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    try:
        assert await relay.drain() > 0
    finally:
        await relay.close()
    assert await Consumer(OrderTotals(), settings=settings, name="example").drain() > 0
    view = await read(db, VIEW)
    assert view == [
        ("bakery", "ann", 1, 300, "b-1"),
        ("bakery", "cy", 0, 0, "b-2"),
        ("shop", "ann", 1, 1250, "s-2"),
        ("shop", "bob", 1, 4200, "s-3"),
    ]
    assert [row[:4] for row in view] == await read(db, FROM_ROWS)  # the service's own rows
    report = await replay(database_url, registered(OrderTotals(), SOURCE), verify=True)
    assert report.differences == 0, report.lines()
    assert await read(db, VIEW) == view  # verify leaves the live table alone
