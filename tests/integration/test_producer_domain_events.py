"""Domain events through the producer library (R-06): the caller's own events, appended to the
event log inside its transaction, fanned out by the relay to the events streams and never to
workers; bad input is refused before anything is written."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import (
    InvalidInputError,
    PayloadTooLargeError,
    ProducerTransactionError,
    StreamOrderConflictError,
)
from awooop.producer import DomainEvent
from awooop.projections.registry import get, projector_names
from awooop.projections.replay import replay
from awooop.projections.runner import Projector
from awooop.streams.envelope import decode_envelope
from awooop.streams.relay import Relay
from tests.support.runs import create_runs
from tests.support.streams import keys_for

PROJECT = "shop"


def placed(order: int, stream: str | None = None) -> DomainEvent:
    return DomainEvent(stream or f"order-{order}", "OrderPlaced", {"order": order})


async def stream_rows(db: Database, project: str = PROJECT) -> list[Any]:
    async with db.tenant(project) as conn:
        return await conn.fetch(
            "SELECT stream_id, version, event_type, data, metadata FROM awooop_events "
            "WHERE stream_id LIKE 'domain/%' ORDER BY position"
        )


async def test_emit_appends_at_the_head_of_the_projects_stream(db: Database) -> None:
    first = await producer.emit(db, PROJECT, placed(1))
    paid = DomainEvent("order-1", "OrderPaid", {"order": 1, "amount": "9.90"})
    second, other = await producer.emit_many(db, PROJECT, [paid, placed(2)])
    assert (first.stream_id, first.version) == ("domain/shop/order-1", 1)
    assert (second.stream_id, second.version) == ("domain/shop/order-1", 2)
    assert (other.stream_id, other.version) == ("domain/shop/order-2", 1)
    rows = await stream_rows(db)
    assert [(r["stream_id"], r["version"], r["event_type"]) for r in rows] == [
        ("domain/shop/order-1", 1, "OrderPlaced"),
        ("domain/shop/order-1", 2, "OrderPaid"),
        ("domain/shop/order-2", 1, "OrderPlaced"),
    ]
    assert rows[1]["data"] == {"order": 1, "amount": "9.90"}
    assert rows[0]["metadata"]["source"] == "producer"
    assert await stream_rows(db, "another-project") == []  # row-level security


async def test_in_the_callers_transaction_events_commit_or_roll_back_with_it(
    db: Database,
) -> None:
    async with db.tenant_pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await producer.set_tenant(conn, PROJECT)
        await producer.emit(conn, PROJECT, placed(7))
        await transaction.rollback()  # the caller's business write failed
        assert await stream_rows(db) == []
        async with conn.transaction():
            await producer.set_tenant(conn, PROJECT)
            emitted = await producer.emit(conn, PROJECT, placed(7))
    assert emitted.version == 1
    assert [r["version"] for r in await stream_rows(db)] == [1]


async def test_the_callers_transaction_must_carry_the_same_tenant(db: Database) -> None:
    async with db.tenant_pool.acquire() as conn:
        with pytest.raises(ProducerTransactionError):
            await producer.emit(conn, PROJECT, placed(1))  # no transaction
        async with conn.transaction():
            await producer.set_tenant(conn, "someone-else")
            with pytest.raises(ProducerTransactionError) as refused:
                await producer.emit(conn, PROJECT, placed(1))
            assert refused.value.code == "E-INGEST-001"
            # nothing failed inside Postgres: the caller's transaction goes on
            assert await conn.fetchval("SELECT 1") == 1
    assert await stream_rows(db) == []


@pytest.mark.parametrize(
    ("event", "error", "says"),
    [
        (DomainEvent("", "OrderPlaced", {}), InvalidInputError, "stream name"),
        (DomainEvent("a/b", "OrderPlaced", {}), InvalidInputError, "stream name"),
        (DomainEvent("order-1", "orderPlaced", {}), InvalidInputError, "capital letter"),
        (DomainEvent("order-1", "RunCreated", {}), InvalidInputError, "runtime's own"),
        (DomainEvent("order-1", "OrderPlaced", [1]), InvalidInputError, "JSON object"),  # type: ignore[arg-type]
        (DomainEvent("order-1", "OrderPlaced", {"x": object()}), InvalidInputError, "JSON"),
        (DomainEvent("order-1", "OrderPlaced", {"x": "a\x00b"}), InvalidInputError, "NUL"),
        (DomainEvent("order-1", "OrderPlaced", {"x": "y" * 2048}), PayloadTooLargeError, "1024"),
    ],
)
async def test_bad_events_are_refused_with_a_code_and_write_nothing(
    db: Database, settings: Settings, event: DomainEvent, error: type[Exception], says: str
) -> None:
    small = msgspec.structs.replace(settings, http_max_body_bytes=1024)
    with pytest.raises(error) as refused:
        await producer.emit_many(db, PROJECT, [placed(1), event], settings=small)
    assert says in str(refused.value)
    assert refused.value.code.startswith("E-INPUT-")  # type: ignore[attr-defined]
    assert await stream_rows(db) == []


@pytest.mark.connections(14)
async def test_concurrent_emitters_to_one_stream_get_every_version_once(db: Database) -> None:
    results = await asyncio.gather(
        *(producer.emit(db, PROJECT, placed(i, "busy")) for i in range(30))
    )
    assert sorted(r.version for r in results) == list(range(1, 31))
    rows = await stream_rows(db)
    assert sorted(r["data"]["order"] for r in rows) == list(range(30))


@pytest.mark.connections(14)
async def test_emitters_whose_transactions_wrote_nothing_before_are_never_refused(
    db: Database,
) -> None:
    """No retry here (the caller's own transactions): each transaction takes the stream's
    lock before it has an id, so none can be older than the stream's last writer. Without
    the lock, several of them are refused with E-EVENT-002."""

    async def one(order: int) -> producer.Emitted:
        async with db.tenant_pool.acquire() as conn, conn.transaction():
            await producer.set_tenant(conn, PROJECT)
            return await producer.emit(conn, PROJECT, placed(order, "busy"))

    results = await asyncio.gather(*(one(i) for i in range(30)))
    assert sorted(r.version for r in results) == list(range(1, 31))


async def test_the_relay_publishes_them_to_the_events_streams_only(
    db: Database, settings: Settings, redis: Any, database_url: str
) -> None:
    await create_runs(db, PROJECT, 1)  # a run next to them: its RunCreated goes to the workers
    emitted = await producer.emit(db, PROJECT, placed(5))
    keys = keys_for(settings)
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        assert await relay.drain() == 2
    finally:
        await relay.close()
    published: dict[str, list[str]] = {"events": [], "work": []}
    for shard in keys.shards():
        for kind, stream in (
            ("events", keys.events_stream(shard)),
            ("work", keys.work_stream(shard)),
        ):
            for _, fields in await redis.xrange(stream):
                envelope = decode_envelope(next(iter(fields.values())))
                published[kind].append(envelope.event_type)
                if envelope.event_type == "OrderPlaced":
                    assert envelope.stream_id == emitted.stream_id
                    assert msgspec.json.decode(envelope.payload) == {"order": 5}
                    # every projector shares the events streams and passes it by
                    assert not any(
                        Projector(db, get(name)).follows(envelope) for name in projector_names()
                    )
    assert sorted(published["events"]) == ["OrderPlaced", "RunCreated"]
    assert published["work"] == ["RunCreated"]
    # run state is rebuilt from the run streams only: the domain stream changes nothing
    assert (await replay(database_url, get("run_state"))).differences == 0


async def test_a_stale_writer_gets_a_retryable_conflict_and_its_transaction_goes_on(
    db: Database,
) -> None:
    async with (
        db.tenant_pool.acquire() as older,
        db.tenant_pool.acquire() as newer,
        older.transaction(),
    ):
        await producer.set_tenant(older, PROJECT)
        await older.execute("SELECT pg_current_xact_id()")  # the older transaction id
        async with newer.transaction():
            await producer.set_tenant(newer, PROJECT)
            await producer.emit(newer, PROJECT, placed(1, "race"))
        with pytest.raises(StreamOrderConflictError) as refused:
            await producer.emit(older, PROJECT, placed(2, "race"))
        assert refused.value.code == "E-EVENT-002" and refused.value.retryable
        assert await older.fetchval("SELECT 1") == 1  # no SQL error: still usable
    assert [r["version"] for r in await stream_rows(db)] == [1]
