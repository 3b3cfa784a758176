"""The producer library (R-06) on real Postgres: own transactions and the caller's."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import (
    InvalidInputError,
    MissingEventIdError,
    ProducerTransactionError,
    UnknownChannelError,
)
from awooop.core.events import run_stream_id
from awooop.core.telemetry import configure_tracing
from awooop.eventlog import eventlog
from awooop.ingest import credentials
from awooop.producer import ChannelEvent
from tests.support.ingest import counts

PROJECT = "shop"


def api_event(key: str | None = None, **input: object) -> ChannelEvent:
    return ChannelEvent("api", key or f"order-{uuid.uuid4().hex}", input or {"order": 1})


@pytest.fixture
async def orders(db: Database, database_url: str) -> Database:
    """A table of the calling service, next to the runtime's tables."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)")
        await conn.execute("GRANT SELECT ON orders TO awooop_platform")
        await conn.execute("GRANT SELECT, INSERT ON orders TO awooop_app")
    finally:
        await conn.close()
    return db


async def test_submit_creates_a_run_and_a_repeat_returns_it(db: Database) -> None:
    event = api_event()
    first = await producer.submit(db, PROJECT, event)
    again = await producer.submit(db, PROJECT, event)
    assert first.created and not again.created
    assert again.run_id == first.run_id
    async with db.tenant(PROJECT) as conn:
        state = await conn.fetchrow(
            "SELECT status, input FROM awooop_run_state WHERE run_id = $1", first.run_id
        )
        (created,) = await eventlog.read_stream(conn, run_stream_id(first.run_id))
    assert (state["status"], state["input"]) == ("PENDING", {"order": 1})
    assert created.metadata["source"] == "producer"


async def test_the_event_carries_the_trace_of_the_producer_span(db: Database) -> None:
    configure_tracing("awooop-test")
    result = await producer.submit(db, PROJECT, api_event())
    async with db.tenant(PROJECT) as conn:
        (created,) = await eventlog.read_stream(conn, run_stream_id(result.run_id))
    assert created.metadata["traceparent"].startswith("00-")


async def test_submit_many_dedupes_within_the_batch_and_against_the_table(db: Database) -> None:
    seen = await producer.submit(db, PROJECT, api_event("k-0"))
    batch = [api_event(f"k-{i}") for i in range(300)] + [api_event("k-5"), api_event("k-0")]
    batch.append(ChannelEvent("telegram", "77", {"update_id": 77}))
    before = await counts(db)
    results = await producer.submit_many(db, PROJECT, batch)
    after = await counts(db)
    assert [r.provider_event_id for r in results] == [e.provider_event_id for e in batch]
    assert results[0] == producer.Submitted("k-0", seen.run_id, False)
    assert sum(r.created for r in results) == 300  # k-1..k-299 and telegram 77
    assert results[300] == producer.Submitted("k-5", results[5].run_id, False)
    assert results[301].run_id == seen.run_id
    assert len({r.run_id for r in results}) == 301
    assert {t: after[t] - before[t] for t in after} == dict.fromkeys(after, 300)


@pytest.mark.connections(17)
async def test_100_concurrent_submits_of_one_key_make_one_run(settings: Settings) -> None:
    db = await Database.open(settings.database_url, max_size=12)
    try:
        event = api_event()
        results = await asyncio.gather(*(producer.submit(db, PROJECT, event) for _ in range(100)))
        assert sorted(r.created for r in results) == [False] * 99 + [True]
        assert len({r.run_id for r in results}) == 1
        async with db.tenant(PROJECT) as conn:
            runs = await conn.fetchval(
                "SELECT count(*) FROM awooop_run_state WHERE provider_event_id = $1",
                event.provider_event_id,
            )
        assert runs == 1
    finally:
        await db.close()


async def test_a_repeat_waits_for_an_uncommitted_first_arrival(db: Database) -> None:
    """The race the dedupe insert must win: the first arrival has inserted but not committed."""
    event = api_event()
    for outcome in ("commit", "rollback"):
        async with db.tenant_pool.acquire() as first_conn:
            tx = first_conn.transaction()
            await tx.start()
            await producer.set_tenant(first_conn, PROJECT)
            first = await producer.submit(first_conn, PROJECT, event)
            assert first.created
            repeat = asyncio.ensure_future(producer.submit(db, PROJECT, event))
            await asyncio.sleep(0.3)  # room for the repeat to return, were it not blocked
            assert not repeat.done()  # blocked on the uncommitted dedupe row
            await (tx.commit() if outcome == "commit" else tx.rollback())
            second = await asyncio.wait_for(repeat, 10)
        if outcome == "commit":
            assert (second.created, second.run_id) == (False, first.run_id)
            event = api_event()  # a fresh key for the rollback round
        else:
            assert second.created and second.run_id != first.run_id


async def test_a_rolled_back_caller_transaction_leaves_nothing(orders: Database) -> None:
    before = await counts(orders)

    class Abort(Exception):
        pass

    created: list[bool] = []

    async def place_order_then_fail() -> None:
        async with orders.tenant_pool.acquire() as conn, conn.transaction():
            await producer.set_tenant(conn, PROJECT)
            await conn.execute("INSERT INTO orders VALUES (1, 'paid')")
            results = await producer.submit_many(conn, PROJECT, [api_event(), api_event()])
            created.extend(r.created for r in results)
            raise Abort

    with pytest.raises(Abort):
        await place_order_then_fail()
    assert created == [True, True]
    assert await counts(orders) == before
    async with orders.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM orders") == 0


async def test_a_committed_caller_transaction_keeps_its_rows_and_the_run(
    orders: Database,
) -> None:
    async with orders.tenant_pool.acquire() as conn, conn.transaction():
        await producer.set_tenant(conn, PROJECT)
        await conn.execute("INSERT INTO orders VALUES (2, 'paid')")
        result = await producer.submit(conn, PROJECT, api_event("order-2", order=2))
    async with orders.tenant(PROJECT) as conn:
        assert await conn.fetchval("SELECT note FROM orders WHERE id = 2") == "paid"
        assert await conn.fetchval(
            "SELECT input FROM awooop_run_state WHERE run_id = $1", result.run_id
        ) == {"order": 2}


@pytest.mark.parametrize("cache_s", [0.0, 60.0])
async def test_the_callers_connection_must_carry_the_tenant_in_a_transaction(
    db: Database, settings: Settings, cache_s: float
) -> None:
    """Refused with E-INGEST-001 and nothing written, the transaction still usable, whether
    the connection's configuration of the channel was read by this call or cached by the one
    before (60 s: only the ingest statement's own check stands between)."""
    config = msgspec.structs.replace(settings, ingest_config_cache_s=cache_s)
    async with db.tenant_pool.acquire() as conn:
        async with conn.transaction():
            await producer.set_tenant(conn, PROJECT)
            await producer.submit(conn, PROJECT, api_event(), settings=config)
        before = await counts(db)
        with pytest.raises(ProducerTransactionError):
            await producer.submit(conn, PROJECT, api_event(), settings=config)  # no transaction
        with pytest.raises(ProducerTransactionError):
            await producer.set_tenant(conn, PROJECT)
        for tenant in (None, "another"):
            async with conn.transaction():
                if tenant is not None:
                    await producer.set_tenant(conn, tenant)
                for call in (
                    producer.submit(conn, PROJECT, api_event(), settings=config),
                    producer.submit_many(conn, PROJECT, [api_event()], settings=config),
                ):
                    with pytest.raises(ProducerTransactionError) as refusal:
                        await call
                    assert refusal.value.code == "E-INGEST-001"
                    assert await conn.fetchval("SELECT 1") == 1  # still usable
    assert await counts(db) == before


async def test_a_repeatable_read_caller_gets_a_retryable_conflict(db: Database) -> None:
    event = api_event()
    async with db.tenant_pool.acquire() as conn:
        async with conn.transaction(isolation="repeatable_read"):
            await producer.set_tenant(conn, PROJECT)
            await conn.fetchval("SELECT 1")  # the snapshot is taken here
            await producer.submit(db, PROJECT, event)  # committed after that snapshot
            with pytest.raises(asyncpg.SerializationError):
                await producer.submit(conn, PROJECT, event)
        # Retried (a new transaction), the repeat is recognised.
        async with conn.transaction(isolation="repeatable_read"):
            await producer.set_tenant(conn, PROJECT)
            assert not (await producer.submit(conn, PROJECT, event)).created


@pytest.mark.parametrize(
    ("event", "error"),
    [
        (ChannelEvent("slack", "k", {}), UnknownChannelError),
        (ChannelEvent("api", "", {}), MissingEventIdError),
        (ChannelEvent("api", "x" * 257, {}), InvalidInputError),
        (ChannelEvent("api", "k", {"when": object()}), InvalidInputError),
        (ChannelEvent("api", "k", {"nul": "a\x00b"}), InvalidInputError),
    ],
)
async def test_a_bad_event_refuses_the_whole_batch(
    db: Database, event: ChannelEvent, error: type[Exception]
) -> None:
    before = await counts(db)
    with pytest.raises(error):
        await producer.submit_many(db, PROJECT, [api_event(), event])
    assert await counts(db) == before


@pytest.mark.connections(9)
async def test_submit_keeps_the_channel_configuration_for_the_cache_age(
    db: Database, settings: Settings
) -> None:
    """submit() with a Database reads the configuration once per AWOOOP_INGEST_CONFIG_CACHE_S
    (as the HTTP server does), and so do submit_many and a caller's transaction, each in a
    cache of their own (per Database, per connection); with 0, every call reads it."""

    async def ttl_of(key: str) -> float:
        async with db.tenant("p1") as conn:
            value = await conn.fetchval(
                "SELECT expires_at - created_at FROM awooop_channel_event_dedupe "
                "WHERE provider_event_id = $1",
                key,
            )
        return float(value.total_seconds())

    cached = msgspec.structs.replace(settings, ingest_config_cache_s=60.0)
    await credentials.set_dedupe_ttl(db, "p1", "api", 90)
    await producer.submit(db, "p1", api_event("a"), settings=cached)
    await credentials.set_dedupe_ttl(db, "p1", "api", 120)
    await producer.submit(db, "p1", api_event("b"), settings=cached)
    await producer.submit_many(db, "p1", [api_event("c")], settings=cached)
    async with db.tenant_pool.acquire() as conn:

        async def in_caller_transaction(key: str) -> None:
            async with conn.transaction():
                await producer.set_tenant(conn, "p1")
                await producer.submit(conn, "p1", api_event(key), settings=cached)

        await in_caller_transaction("f")
        await credentials.set_dedupe_ttl(db, "p1", "api", 130)
        await producer.submit_many(db, "p1", [api_event("g")], settings=cached)
        await in_caller_transaction("h")
    assert [await ttl_of(k) for k in "abcfgh"] == [90, 90, 120, 120, 120, 120]

    uncached = msgspec.structs.replace(settings, ingest_config_cache_s=0)
    other = await Database.open(settings.database_url, max_size=1)
    try:
        await producer.submit(other, "p1", api_event("d"), settings=uncached)
        await credentials.set_dedupe_ttl(other, "p1", "api", 150)
        await producer.submit(other, "p1", api_event("e"), settings=uncached)
    finally:
        await other.close()
    assert [await ttl_of(k) for k in "de"] == [130, 150]
