"""The relay publishes the event log and the contract outbox to Redis Streams (R-22, R-31)."""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

import msgspec
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import decode_event, run_stream_id
from awooop.streams.envelope import FIELD, decode_envelope, decode_notice
from awooop.streams.keys import Keys
from awooop.streams.relay import Relay
from awooop.streams.relay_cursor import CURSOR_SAVE_INTERVAL_S
from tests.support.streams import claim, create_run, keys_for, running_relay, step
from tests.support.waiting import eventually


def projects_on_every_shard(keys: Keys) -> dict[int, str]:
    found: dict[int, str] = {}
    n = 0
    while len(found) < keys.shard_count:
        project = f"proj{n}"
        found.setdefault(keys.shard_of(project), project)
        n += 1
    return found


async def entries(redis: Any, stream: str) -> list[Any]:
    return [decode_envelope(fields[FIELD]) for _, fields in await redis.xrange(stream)]


async def test_events_go_to_their_shard_and_dispatch_events_also_to_work(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    projects = projects_on_every_shard(keys)
    runs = {shard: await create_run(db, project) for shard, project in projects.items()}
    await claim(db, projects[0], runs[0])
    await step(db, projects[0], runs[0], "s1")
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        assert await relay.drain() == len(projects) + 2
    finally:
        await relay.close()

    for shard, project in projects.items():
        events = await entries(redis, keys.events_stream(shard))
        work = await entries(redis, keys.work_stream(shard))
        assert {e.project_id for e in events + work} == {project}
        assert [e.event_type for e in work] == ["RunCreated"]
        expected = ["RunCreated", "RunClaimed", "StepCompleted"] if shard == 0 else ["RunCreated"]
        assert [e.event_type for e in events] == expected
        assert [e.version for e in events] == list(range(1, len(expected) + 1))
        assert work[0] == events[0]
        first = events[0]
        assert first.stream_id == run_stream_id(runs[shard])
        assert first.attempt == 0
        assert decode_event(first.payload).run_id == runs[shard]  # type: ignore[union-attr]  # RunCreated
        assert abs(first.recorded_at - time.time()) < 60


async def test_cursor_is_kept_in_postgres_and_nothing_is_published_twice(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    await create_run(db, "p1")
    first = Relay(settings=settings, redis=redis, keys=keys)
    assert await first.drain() == 1
    await first.close()
    await create_run(db, "p1")
    second = Relay(settings=settings, redis=redis, keys=keys)
    try:
        assert await second.drain() == 1
    finally:
        await second.close()
    shard = keys.shard_of("p1")
    assert await redis.xlen(keys.events_stream(shard)) == 2
    row = await cursor_row(db)
    assert row["published"] == 2
    assert row["relay_attempts"] == 2
    assert row["relay_failures"] == 0
    assert row["leader"] == second.relay_id


async def cursor_row(db: Database) -> Any:
    async with db.platform() as conn:
        return await conn.fetchrow("SELECT * FROM awooop_relay_cursor WHERE name = 'events'")


async def saved_cursor(db: Database) -> tuple[int, int, int]:
    row = await cursor_row(db)
    return row["position"], row["published"], row["relay_attempts"]


async def published(relay: Relay, count: int) -> None:
    """Run leader iterations until the relay has published ``count`` events. Not always the
    first: a transaction of another database that ends mid-read holds the follower's horizon
    back for that one read (FOLLOWER_HORIZON keeps what it cannot place), and the other test
    processes' transactions come and go all the time."""

    async def iteration() -> int:
        await relay.run_once()
        return relay.published

    await eventually(iteration, equals=count, what=f"the relay publishing event {count}")


async def test_the_cursor_is_saved_at_most_every_interval_and_when_the_relay_stops(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    await create_run(db, "p1")
    now = [0.0]  # no save comes due by the machine being slow
    relay = Relay(settings=settings, redis=redis, keys=keys, clock=lambda: now[0])
    try:
        assert await relay.drain() == 1  # a drain ends with its position saved
        first = await saved_cursor(db)
        assert first[1:] == (1, 1)
        await create_run(db, "p1")
        await published(relay, 2)  # published, but the last save was under an interval ago
        assert relay.cursor.position > first[0]
        assert await saved_cursor(db) == first  # a crash now would republish it: a duplicate
        now[0] += CURSOR_SAVE_INTERVAL_S  # the save comes due
        await relay.run_once()  # nothing new, but the save is due
        assert await saved_cursor(db) == (relay.cursor.position, 2, 2)
        await create_run(db, "p1")
        await published(relay, 3)
    finally:
        await relay.close()  # a clean stop saves what it published
    assert await saved_cursor(db) == (relay.cursor.position, 3, 3)


async def test_the_envelope_carries_the_relay_span_in_the_producers_trace(
    settings: Settings, db: Database, redis: Any, spans: InMemorySpanExporter
) -> None:
    keys = keys_for(settings)
    sampled = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    unsampled = "00-" + "ef" * 16 + "-" + "cd" * 8 + "-00"
    await create_run(db, "p1", {"traceparent": sampled, "tracestate": "k=v"})
    await create_run(db, "p1", {"traceparent": unsampled})
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        await relay.drain()
    finally:
        await relay.close()
    first, second = await entries(redis, keys.events_stream(keys.shard_of("p1")))
    [publish] = [s for s in spans.get_finished_spans() if s.name == "publish RunCreated"]
    # a sampled trace: the envelope names the relay's span, a child of the producer's
    assert publish.parent is not None and publish.parent.span_id == 0xCDCDCDCDCDCDCDCD
    assert first.traceparent == f"00-{'ab' * 16}-{publish.context.span_id:016x}-01"
    assert first.tracestate == "k=v"
    # an unsampled one: no span, the producer's context travels unchanged
    assert (second.traceparent, second.tracestate) == (unsampled, None)


async def test_notify_wakes_the_relay_long_before_the_poll_interval(
    settings: Settings, db: Database, redis: Any
) -> None:
    slow_poll = msgspec.structs.replace(settings, relay_poll_interval_s=30.0)
    keys = keys_for(settings)
    relay = Relay(settings=slow_poll, redis=redis, keys=keys)
    stream = keys.events_stream(keys.shard_of("p1"))
    async with running_relay(relay, slow_poll):
        await eventually(
            lambda: relay.is_leader and relay.caught_up, what="the relay leads and has caught up"
        )
        started = time.monotonic()
        await create_run(db, "p1")
        await eventually(
            lambda: redis.xlen(stream),
            timeout_s=10,
            interval_s=0.005,
            what="the event in Redis: NOTIFY woke the relay",
        )
    assert time.monotonic() - started < 10


async def insert_notice(db: Database, project: str = "__platform__") -> uuid.UUID:
    async with db.platform_writes() as conn:
        revision = await conn.fetchval(
            "INSERT INTO awooop_contract_revisions (project_id, contract_family, contract_id, "
            "body, body_hash) VALUES ($1, 'platform_resource', 'ollama_topology', $2, $3) "
            "RETURNING revision_id",
            project,
            {"x": 1},
            hashlib.sha256(b"x").hexdigest(),
        )
        event_id: uuid.UUID = await conn.fetchval(
            "INSERT INTO awooop_contract_outbox (event_type, project_id, contract_family, "
            "contract_id, old_revision_id, new_revision_id, traceparent) VALUES "
            "('RevisionActivated', $1, 'platform_resource', 'ollama_topology', NULL, $2, $3) "
            "RETURNING event_id",
            project,
            revision,
            "00-" + "12" * 16 + "-" + "34" * 8 + "-01",
        )
    return event_id


async def test_contract_notices_are_delivered_and_marked(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    event_id = await insert_notice(db)
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        await relay.drain()
        epoch = await redis.get(keys.notices_epoch())
        assert epoch is not None
        [(_, fields)] = await redis.xrange(keys.notices_stream())
        notice = decode_notice(fields[FIELD])
        assert notice.event_id == event_id
        assert (notice.contract_family, notice.contract_id) == (
            "platform_resource",
            "ollama_topology",
        )
        assert notice.traceparent is not None and notice.traceparent.startswith("00-1212")
        async with db.platform() as conn:
            row = await conn.fetchrow(
                "SELECT delivered_at, relay_attempts FROM awooop_contract_outbox "
                "WHERE event_id = $1",
                event_id,
            )
        assert row["delivered_at"] is not None
        assert row["relay_attempts"] == 1
        # Delivered rows are not sent again; a lost notices epoch is written afresh.
        await redis.delete(keys.notices_epoch())
        await relay.drain()
        assert await redis.xlen(keys.notices_stream()) == 1
        new_epoch = await redis.get(keys.notices_epoch())
        assert new_epoch is not None and new_epoch != epoch
    finally:
        await relay.close()


async def test_a_standby_relay_takes_over_when_the_leader_stops(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    leader = Relay(settings=settings, redis=redis, keys=keys, relay_id="a")
    standby = Relay(settings=settings, redis=redis, keys=keys, relay_id="b")
    try:
        await create_run(db, "p1")
        assert await leader.drain() == 1
        with pytest.raises(RuntimeError, match="another relay"):
            await standby.drain()
        assert not standby.is_leader
        await leader.close()
        await create_run(db, "p1")
        assert await standby.drain() == 1
        assert standby.is_leader
    finally:
        await leader.close()
        await standby.close()
    assert await redis.xlen(keys.events_stream(keys.shard_of("p1"))) == 2
