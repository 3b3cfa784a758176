"""A service's own projection (docs/consumers.md, R-61): registered, run by the built-in
projectors' runner and consumer groups, rebuilt by the replay tool, healed after Redis lost its
data, and refused when its table is not isolated per tenant."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from awooop import producer
from awooop.consumer import Consumer, Record, consume
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import ProjectionRegistrationError, ProjectionTenancyError
from awooop.examples import read_models
from awooop.loops.projector import consumer_for
from awooop.projections import registry
from awooop.projections.lag import projector_lag
from awooop.projections.registered import Registered
from awooop.projections.replay import replay
from awooop.projections.runner import Projector
from awooop.services import Services
from awooop.streams.consumer import GroupConsumer
from awooop.streams.relay import Relay
from tests.support import shop_projection
from tests.support.logins import bound_login
from tests.support.services import private_redis
from tests.support.shop_projection import OrderTotals, Shop, view
from tests.support.streams import keys_for, running_relay
from tests.support.waiting import eventually

SOURCE = "awooop.examples.orders:OrderTotals"


@pytest.fixture
def registered_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--projection SOURCE`` for this test only (other tests list every projection)."""
    monkeypatch.setattr(registry, "_sources", [])
    registry.use_sources([SOURCE])


@pytest.fixture
async def order_totals(database_url: str, db: Database, registered_here: None) -> Registered:
    await shop_projection.create_table(database_url)
    projection = registry.get("order_totals")
    assert isinstance(projection, Registered)
    await registry.check_tables(db, [projection])
    return projection


async def pending(services: Services, consumer: GroupConsumer) -> int:
    total = 0
    for stream in consumer.streams:
        if not await services.redis.exists(stream):
            continue
        for group in await services.redis.xinfo_groups(stream):
            if group["name"].decode() == consumer.group:
                total += group["pending"]
    return total


async def checkpoints(db: Database) -> list[tuple[Any, ...]]:
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT c.stream_id, c.version, s.version FROM awooop_projection_checkpoints c "
            "JOIN awooop_event_streams s USING (stream_id) WHERE c.projection = 'order_totals' "
            "ORDER BY 1"
        )
    return [tuple(r) for r in rows]


@pytest.mark.connections(12)
async def test_a_service_projection_builds_its_view_and_replay_rebuilds_the_same_rows(
    services: Services, db: Database, database_url: str, order_totals: Registered
) -> None:
    shop = Shop(db, seed=1)
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    consumer = consumer_for(services, Projector(db, order_totals), "c1")
    try:
        await consumer.ensure_groups()
        await shop.run(60)
        assert await relay.drain() > 0
        assert await consumer.run_until_idle() > 0
        built = await view(db)
        assert built == shop.expected()
        assert await pending(services, consumer) == 0
        # every followed stream's checkpoint stands at its last event, noise included
        assert all(mine == log for _, mine, log in await checkpoints(db))

        report = await replay(database_url, registry.get("order_totals"), verify=True)
        assert report.differences == 0, report.lines()
        assert await view(db) == built

        # Orders published and not consumed yet when the rebuilt table is swapped in: it has
        # them, and so do the checkpoints the swap rewrote; the projector then takes their
        # messages for duplicates (no order counted twice) and goes on with new ones.
        await shop.run(30)
        await relay.drain()
        report = await replay(database_url, registry.get("order_totals"), swap=True)
        assert report.swapped
        assert report.differences > 0  # the live view was behind
        assert await view(db) == shop.expected()
        assert all(mine == log for _, mine, log in await checkpoints(db))
        await shop.run(30)
        await relay.drain()
        assert await consumer.run_until_idle() > 0
        assert await view(db) == shop.expected()
        assert await Projector(db, registry.get("order_totals")).reconcile() == 0
        again = await replay(database_url, registry.get("order_totals"))
        assert again.differences == 0, again.lines()
    finally:
        await relay.close()


async def test_a_service_projection_heals_from_postgres_after_redis_lost_its_data(
    services: Services, db: Database, order_totals: Registered
) -> None:
    shop = Shop(db, seed=2)
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    projector = Projector(db, order_totals)
    resets: list[int] = []
    heal = projector.on_reset

    async def counted(shard: int) -> None:
        resets.append(shard)
        await heal(shard)

    projector.on_reset = counted  # type: ignore[method-assign]  # observe the hook
    consumer = consumer_for(services, projector, "c1")
    try:
        await consumer.ensure_groups()
        await shop.run(40)
        await relay.drain()
        await consumer.run_until_idle()
        # events written and published, but not consumed yet, when Redis loses them ...
        await shop.run(40)
        await relay.drain()
        doomed = [k async for k in services.redis.scan_iter(match=f"{services.keys.prefix}:*")]
        await services.redis.delete(*doomed)
        # ... while orders go on; the relay rebuilds the shards from Postgres.
        await shop.run(40)
        await relay.drain()
        await consumer.run_until_idle()
        await consumer.check_epochs()
        await consumer.run_until_idle()
    finally:
        await relay.close()
    assert resets, "the consumer never saw the rebuilt shard"
    assert await view(db) == shop.expected()
    assert all(mine == log for _, mine, log in await checkpoints(db))


@pytest.mark.parametrize(
    ("sql", "error", "says"),
    [
        ("", ProjectionRegistrationError, "does not exist"),
        (
            "CREATE TABLE example_order_totals (customer text PRIMARY KEY, orders int, total int)",
            ProjectionTenancyError,
            "no project_id column",
        ),
        (
            "CREATE TABLE example_order_totals (project_id text, customer text, orders int, "
            "total int, PRIMARY KEY (project_id, customer))",
            ProjectionTenancyError,
            "awooop_enforce_tenant_isolation('example_order_totals')",
        ),
        (
            shop_projection.TABLE_SQL + "DROP POLICY tenant_binding ON example_order_totals",
            ProjectionTenancyError,
            "has no tenant isolation",
        ),
        (
            "CREATE TABLE example_order_totals (project_id text PRIMARY KEY, orders int); "
            "SELECT awooop_enforce_tenant_isolation('example_order_totals')",
            ProjectionRegistrationError,
            "has no column customer",
        ),
    ],
)
@pytest.mark.usefixtures("registered_here")
async def test_a_table_that_is_missing_or_not_isolated_per_tenant_is_refused(
    db: Database, database_url: str, sql: str, error: type[Exception], says: str
) -> None:
    if sql:
        await shop_projection.create_table(database_url, sql)
    with pytest.raises(error) as raised:
        await registry.check_tables(db, [registry.get("order_totals")])
    assert says in str(raised.value)
    assert raised.value.code in ("E-PROJECTION-003", "E-PROJECTION-004")  # type: ignore[attr-defined]


@pytest.mark.connections(11)
async def test_consume_hands_each_event_to_the_handler_once_across_restarts(
    services: Services, settings: Settings, db: Database
) -> None:
    shop = Shop(db, seed=3)
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    seen: list[tuple[str, int]] = []

    async def handler(conn: Connection, records: Sequence[Record]) -> None:
        assert conn.is_in_transaction()  # the one the checkpoint is written in
        seen.extend((r.stream_id, r.version) for r in records)

    async def consuming_until(count: int) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            consume("audit", ["OrderPlaced"], handler, stop, settings=settings)
        )
        try:
            await eventually(lambda: len(seen) >= count, what=f"{count} orders handled")
        finally:
            stop.set()
            await task

    try:
        await shop.run(20, projects=("shop",))
        await relay.drain()
        await consuming_until(await placed_events(db))
        first = list(seen)
        await shop.run(20, projects=("shop",))
        await relay.drain()
        placed = await placed_events(db)
        await consuming_until(placed)
    finally:
        await relay.close()
    assert len(seen) == len(set(seen)) == placed, "an event was handed over twice, or missed"
    assert seen[: len(first)] == first
    assert all(stream.startswith("domain/shop/orders-") for stream, _ in seen)


async def placed_events(db: Database) -> int:
    async with db.platform() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM awooop_events WHERE event_type = 'OrderPlaced'"
        )
    return count


async def test_the_example_read_model_drains_in_a_services_process(
    services: Services, settings: Settings, db: Database, database_url: str
) -> None:
    sql = (Path(read_models.__file__).parent / "read_models.sql").read_text()
    await shop_projection.create_table(database_url, sql)
    opened = [("acme", "billing"), ("acme", "billing"), ("acme", "sales"), ("umbrella", "it")]
    for index, (project, queue) in enumerate(opened):
        ticket = {"ticket": f"T-{index}", "queue": queue}
        await producer.emit(db, project, producer.DomainEvent("tickets", "TicketOpened", ticket))
    await producer.emit(
        db, "acme", producer.DomainEvent("tickets", "TicketClosed", {"queue": "billing"})
    )
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    try:
        await relay.drain()
    finally:
        await relay.close()
    consumer = Consumer(read_models.OpenTickets(), settings=settings, name="example")
    assert await consumer.drain() > 0
    assert await consumer.drain() == 0  # nothing twice: every message was a duplicate or acked
    async with db.platform() as conn:
        rows = await conn.fetch("SELECT project_id, queue, open FROM example_open_tickets")
    assert sorted(tuple(r) for r in rows) == [
        ("acme", "billing", 1),
        ("acme", "sales", 1),
        ("umbrella", "it", 1),
    ]


@pytest.mark.long(30)
@pytest.mark.connections(9)
async def test_a_consumer_loses_nothing_through_flushall_and_a_redis_restart(
    settings: Settings, db: Database, order_totals: Registered
) -> None:
    """On a PRIVATE Redis: orders keep coming while the service's consumer runs, Redis is
    flushed, later stopped and started empty; the view ends equal to every order, each once."""
    shop = Shop(db, seed=4)
    with private_redis() as server:
        chaos = msgspec.structs.replace(
            settings,
            redis_url=server.url,
            relay_poll_interval_s=0.1,
            projector_reconcile_interval_s=3600,  # the streams and the resets must do the work
            projector_reclaim_idle_s=1,
        )
        redis = aioredis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
        relay = Relay(settings=chaos, redis=redis, keys=keys_for(chaos))
        stop = asyncio.Event()
        consuming = asyncio.create_task(Consumer(OrderTotals(), settings=chaos).run(stop))
        try:
            async with running_relay(relay, chaos):
                await shop.run(30)
                await eventually(lambda: view(db), equals=shop.expected(), what="first orders")
                await shop.run(10)
                await redis.flushall()  # messages published and not yet consumed go with it
                await shop.run(30)
                await eventually(lambda: view(db), equals=shop.expected(), what="after FLUSHALL")
                server.stop()
                await shop.run(20)  # written while Redis is away
                server.start()
                await shop.run(10)
                await eventually(
                    lambda: view(db), equals=shop.expected(), timeout_s=60, what="after restart"
                )
        finally:
            stop.set()
            await asyncio.wait_for(consuming, 60)
            await redis.aclose()
    assert all(mine == log for _, mine, log in await checkpoints(db))


async def test_a_service_login_reads_its_bound_projects_rows_only(
    services: Services, settings: Settings, db: Database, database_url: str
) -> None:
    await shop_projection.create_table(database_url)  # SELECT granted to awooop_producer
    shop = Shop(db, seed=5)
    await shop.place("shop", "ann", 10)
    await shop.place("bakery", "bob", 20)
    await Consumer(OrderTotals(), settings=settings).drain()
    assert await view(db) == shop.expected()
    async with bound_login(database_url, ["shop"]) as login:
        conn = await login.connect()
        try:
            seen = {}
            for project in ("shop", "bakery", ""):
                async with conn.transaction():
                    if project:
                        await conn.execute(
                            "SELECT set_config('awooop.project_id', $1, true)", project
                        )
                    rows = await conn.fetch("SELECT project_id, customer FROM example_order_totals")
                    seen[project] = [tuple(r) for r in rows]
        finally:
            await conn.close()
    assert seen == {"shop": [("shop", "ann")], "bakery": [], "": []}


async def test_the_archive_sees_an_unregistered_service_projection_behind_its_checkpoints(
    settings: Settings, db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive's process may not register a service's projection that runs elsewhere:
    the streams it has checkpoints for still hold a partition back while it is behind."""
    await shop_projection.create_table(database_url)
    shop = Shop(db, seed=6)
    await shop.place("shop", "ann", 10)
    await Consumer(OrderTotals(), settings=settings).drain()
    await shop.place("shop", "ann", 5)  # the same stream, not applied yet
    monkeypatch.setattr(registry, "_sources", [])  # as in a process that does not know it
    assert registry.find("order_totals") is None
    now = datetime.now(UTC)
    window = (now - timedelta(days=1), now + timedelta(days=1))
    async with db.platform() as conn:
        behind = await projector_lag(conn, "order_totals", *window)
    assert behind == "stream domain/shop/orders-ann"
    await Consumer(OrderTotals(), settings=settings).drain()
    async with db.platform() as conn:
        assert await projector_lag(conn, "order_totals", *window) is None
