"""The worker's stream path on real Postgres and Redis (R-16): work stream consumption under the
DB lease, touches that keep live entries from reclaim, reclaim reconciled with Postgres, and
dead letters recorded in Postgres."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.core.loops import run_loop
from awooop.eventlog import deadletters, eventlog
from awooop.loops.relay import relay_spec
from awooop.runs import leases
from awooop.streams.envelope import FIELD, decode_envelope, encode
from awooop.streams.keys import WORKER_GROUP, Keys
from awooop.streams.publish import envelope_of
from awooop.streams.relay import Relay
from awooop.worker.runtime import Worker
from tests.support import handlers
from tests.support.runs import all_finished, count_events, create_runs, events_of, load
from tests.support.waiting import eventually
from tests.support.workers import serving_worker, streaming_worker

P = "proj-s"


pytestmark = pytest.mark.fast("streams")


def keys_of(settings: Settings) -> Keys:
    return Keys(settings.redis_key_prefix, settings.shard_count)


async def open_dead_letters(db: Database) -> list[deadletters.DeadLetterRow]:
    return await db.in_tenant(P, lambda c: deadletters.list_open(c, P))


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@asynccontextmanager
async def relay_running(settings: Settings, redis: Any) -> AsyncIterator[None]:
    relay = Relay(settings=settings, redis=redis, keys=keys_of(settings))
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(relay_spec(relay, settings), stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await relay.close()


async def pending(redis: Any, keys: Keys) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for shard in keys.shards():
        stream = keys.work_stream(shard)
        if not await redis.exists(stream):
            continue
        try:
            found += await redis.xpending_range(stream, WORKER_GROUP, "-", "+", 1000)
        except Exception as exc:  # no group yet
            if "NOGROUP" not in str(exc):
                raise
    return found


async def announce(db: Database, redis: Any, keys: Keys, run_id: uuid.UUID) -> tuple[str, str]:
    """XADD the run's RunCreated to its work stream as the relay would; (stream, entry id)."""
    async with db.tenant(P) as conn:
        [first] = (await eventlog.read_stream(conn, run_stream_id(run_id)))[:1]
    stream = keys.work_stream(keys.shard_of(P))
    entry_id = await redis.xadd(stream, {FIELD: encode(envelope_of(first))})
    return stream, entry_id.decode()


async def ghost_reads(redis: Any, stream: str, times: int = 1) -> None:
    """A consumer that reads an entry and dies; each extra time it is delivered again."""
    await redis.xgroup_create(stream, WORKER_GROUP, id="0", mkstream=True)
    await redis.xreadgroup(WORKER_GROUP, "ghost", {stream: ">"}, count=10)
    for _ in range(times - 1):
        entries = await redis.xpending_range(stream, WORKER_GROUP, "-", "+", 10)
        await redis.xclaim(stream, WORKER_GROUP, "ghost", 0, [e["message_id"] for e in entries])


@pytest.mark.connections(23)
async def test_runs_are_taken_from_the_work_stream_and_acknowledged(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_of(fast)
    worker, intake = streaming_worker(db, fast, redis, concurrency=8)
    claims = sample("awooop_lease_claims_total", path="stream")
    async with relay_running(fast, redis), serving_worker(worker, intake):
        run_ids = await create_runs(db, P, 30, payload={})
        await eventually(
            lambda: all_finished(db, run_ids), timeout_s=60, what="the 30 runs finished"
        )
        await eventually(
            lambda: _no_pending(redis, keys), timeout_s=60, what="no work entry pending"
        )
    assert sample("awooop_lease_claims_total", path="stream") == claims + 30
    completed = await count_events(db, "RunCompleted")
    assert [completed[run_stream_id(r)] for r in run_ids] == [1] * 30
    for shard in keys.shards():  # the consumer left the group after a clean stop
        stream = keys.work_stream(shard)
        if await redis.exists(stream):
            names = [c["name"] for c in await redis.xinfo_consumers(stream, WORKER_GROUP)]
            assert worker.worker_id.encode() not in names and worker.worker_id not in names


async def _no_pending(redis: Any, keys: Keys) -> bool:
    return not await pending(redis, keys)


@pytest.mark.connections(9)
async def test_a_live_worker_keeps_its_entries_from_looking_idle(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_of(fast)
    worker, intake = streaming_worker(db, fast, redis, concurrency=4)
    async with relay_running(fast, redis), serving_worker(worker, intake):
        [run_id] = await create_runs(db, P, payload={"sleep": 2.5})
        await eventually(
            lambda: _status(db, run_id, "RUNNING"), timeout_s=60, what="the run RUNNING"
        )
        await asyncio.sleep(1.5)  # longer than the lease: only touches keep the entry fresh
        [entry] = await pending(redis, keys)
        assert entry["consumer"].decode() == worker.worker_id
        assert entry["time_since_delivered"] < 1000  # younger than the lease: not reclaimable
        stream = keys.work_stream(keys.shard_of(P))
        stolen = await redis.xautoclaim(stream, WORKER_GROUP, "thief", 1000, "0-0", count=10)
        assert stolen[1] == []
        await eventually(lambda: all_finished(db, [run_id]), timeout_s=60, what="the run finished")
    assert (await load(db, P, run_id)).attempt_count == 1


async def _status(db: Database, run_id: uuid.UUID, status: str) -> bool:
    return (await load(db, P, run_id)).status == status


async def test_reclaim_takes_a_dead_consumers_run_and_runs_it(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_of(fast)
    [run_id] = await create_runs(db, P, payload={})
    stream, _entry = await announce(db, redis, keys, run_id)
    await ghost_reads(redis, stream)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "ghost", 0.3)) is not None
    await asyncio.sleep(1.1)  # the entry idles past the lease TTL, the lease expires
    _worker, intake = streaming_worker(db, fast, redis, concurrency=4)
    taken = sample("awooop_reclaims_total", outcome="taken")
    assert await intake.reclaim_once() == 1
    await eventually(
        lambda: all_finished(db, [run_id]), timeout_s=60, what="the reclaimed run finished"
    )
    await eventually(lambda: _no_pending(redis, keys), timeout_s=60, what="no work entry pending")
    state = await load(db, P, run_id)
    assert (state.status, state.attempt_count, state.worker_id) == ("COMPLETED", 2, None)
    assert sample("awooop_reclaims_total", outcome="taken") == taken + 1
    assert sample("awooop_lease_claims_total", path="reclaim") >= 1


async def test_reclaim_leaves_a_run_that_a_live_lease_holds(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_of(fast)
    [run_id] = await create_runs(db, P, payload={})
    stream, entry = await announce(db, redis, keys, run_id)
    await ghost_reads(redis, stream)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "holder", 30)) is not None
    await asyncio.sleep(1.1)  # the entry idles past the lease TTL: reclaimable
    worker, intake = streaming_worker(db, fast, redis, concurrency=4)
    assert await intake.reclaim_once() == 1
    await eventually(
        lambda: _reclaim_settled(worker), timeout_s=60, what="the reclaim's tasks settled"
    )
    [left] = await pending(redis, keys)
    assert left["message_id"].decode() == entry
    assert left["times_delivered"] == 1  # the reclaim's delivery was taken back
    assert left["consumer"].decode() == worker.worker_id
    state = await load(db, P, run_id)
    assert (state.status, state.worker_id) == ("RUNNING", "holder")


@pytest.mark.parametrize("held_reclaims", [2, 6])
async def test_a_duplicate_reclaimed_while_held_does_not_fail_the_run(
    db: Database, fast: Settings, redis: Any, held_reclaims: int
) -> None:
    """A long attempt holds the run while a duplicate work message for it
    is reclaimed once per lease TTL (AWOOOP_MAX_DELIVERIES is 3 here). The attempt then ends
    unfinished (its lease runs out) and the next reclaim takes the run and runs it as the next
    attempt. Before, every held reclaim counted a delivery: after 2 of them the next reclaim
    found the lease expired with 4 deliveries and failed the run with E-RUN-005 although it had
    two attempts left; after more the duplicate was acknowledged as superseded."""
    # Entries reclaimable after 0.5 s; the Postgres bound just under the local lease (0.45 s),
    # not a third of it, so that a busy machine's slow statement does not abandon the attempt.
    quick = msgspec.structs.replace(fast, lease_ttl_s=0.5, db_statement_timeout_s=0.4)
    keys = keys_of(quick)
    [run_id] = await create_runs(db, P, payload={})
    stream, entry = await announce(db, redis, keys, run_id)
    await ghost_reads(redis, stream)  # the duplicate: read by a worker that found the run held
    holder_ttl = 5.0
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "holder", holder_ttl))
    worker, intake = streaming_worker(db, quick, redis, concurrency=4)
    left = sample("awooop_reclaims_total", outcome="left")
    for _ in range(held_reclaims):
        renewed = await db.in_platform_writes(
            lambda c: leases.heartbeat(c, "holder", {run_id: 1}, holder_ttl)
        )
        assert renewed == {run_id}  # the long attempt is alive
        await asyncio.sleep(0.6)  # the duplicate idles past the lease TTL
        assert await intake.reclaim_once() == 1
        await eventually(
            lambda: _reclaim_settled(worker), timeout_s=60, what="the reclaim's tasks settled"
        )
        [entry_now] = await pending(redis, keys)
        assert entry_now["message_id"].decode() == entry
        assert entry_now["times_delivered"] == 1
    assert sample("awooop_reclaims_total", outcome="left") == left + held_reclaims
    assert (await load(db, P, run_id)).status == "RUNNING"

    # The long attempt ends unfinished: no more renewals, its lease runs out.
    async def expired() -> bool:
        state, now = await db.in_tenant(P, lambda c: leases.peek(c, run_id))
        return leases.availability(state, now, worker.worker_id) is leases.Availability.EXPIRED

    await eventually(expired, timeout_s=30, what="the holder's lease expired")
    await asyncio.sleep(0.6)  # the duplicate idles past the 0.5 s TTL again
    assert await intake.reclaim_once() == 1
    await eventually(
        lambda: all_finished(db, [run_id]), timeout_s=60, what="the run finished in attempt 2"
    )
    await eventually(lambda: _no_pending(redis, keys), timeout_s=60, what="no work entry pending")
    state = await load(db, P, run_id)
    assert (state.status, state.attempt_count, state.failure_code) == ("COMPLETED", 2, None)
    assert await open_dead_letters(db) == []
    types = [type(e).__name__ for e in await events_of(db, P, run_id)]
    assert types[:4] == ["RunCreated", "RunClaimed", "RunRequeued", "RunClaimed"]
    assert types[-1] == "RunCompleted"


async def _reclaim_settled(worker: Worker) -> bool:
    return not worker._tasks


async def test_reclaims_the_database_refused_count_no_delivery(
    db: Database, fast: Settings, redis: Any, database_url: str
) -> None:
    """A message whose consumer died is reclaimed while Postgres refuses the claim (a revoked
    privilege here; a read-only window alike): the message killed nobody, so none of those
    reclaims counts a delivery, and the run is taken and completed once the database serves
    again, instead of being failed E-RUN-005 as a poison message."""
    keys = keys_of(fast)
    [run_id] = await create_runs(db, P, payload={})
    stream, _entry = await announce(db, redis, keys, run_id)
    await ghost_reads(redis, stream)  # delivered once, to a consumer that died
    worker, intake = streaming_worker(db, fast, redis, concurrency=4)
    owner = await asyncpg.connect(database_url)
    try:
        await owner.execute("REVOKE UPDATE ON awooop_run_state FROM awooop_platform")
        for _ in range(fast.max_deliveries + 2):
            await asyncio.sleep(fast.lease_ttl_s + 0.1)  # idle past the TTL: reclaimable
            assert await intake.reclaim_once() == 1
            await eventually(
                lambda: _reclaim_settled(worker), timeout_s=60, what="the reclaim's tasks settled"
            )
            [entry_now] = await pending(redis, keys)
            assert entry_now["times_delivered"] == 1
        state = await load(db, P, run_id)
        assert (state.status, state.attempt_count) == ("PENDING", 0)
    finally:
        await owner.execute("GRANT UPDATE ON awooop_run_state TO awooop_platform")
        await owner.close()
    await asyncio.sleep(fast.lease_ttl_s + 0.1)
    assert await intake.reclaim_once() == 1
    await eventually(lambda: all_finished(db, [run_id]), timeout_s=60, what="the run finished")
    state = await load(db, P, run_id)
    assert (state.status, state.attempt_count, state.failure_code) == ("COMPLETED", 1, None)


async def test_a_message_delivered_too_often_is_dead_lettered_and_its_run_fails(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_of(fast)
    [run_id] = await create_runs(db, P, payload={})
    stream, entry = await announce(db, redis, keys, run_id)
    await ghost_reads(redis, stream, times=3)  # delivered 3 times to a consumer that died
    await asyncio.sleep(1.1)  # the entry idles past the lease TTL: reclaimable
    _worker, intake = streaming_worker(db, fast, redis, concurrency=4)
    dead = sample("awooop_dead_letters_total")
    assert await intake.reclaim_once() == 1  # the 4th delivery: over the limit of 3
    await eventually(lambda: all_finished(db, [run_id]), timeout_s=60, what="the run failed")
    await eventually(lambda: _no_pending(redis, keys), timeout_s=60, what="no work entry pending")
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-RUN-005")
    assert state.failure_reason is not None and "delivered 4 times" in state.failure_reason
    # Its dead letter, recorded with the failure, says what the consumer that gave up knew.
    [row] = await open_dead_letters(db)
    assert (row.project_id, row.run_id, row.source, row.group_name) == (
        P,
        run_id,
        "work",
        WORKER_GROUP,
    )
    assert (row.source_entry_id, row.delivery_count, row.code) == (entry, 4, "E-RUN-005")
    assert row.event_type == "RunCreated" and row.message is not None
    assert decode_envelope(row.message).stream_id == run_stream_id(run_id)
    assert row.reason == state.failure_reason
    assert sample("awooop_dead_letters_total") == dead + 1
    # A repeat of the same give-up (a second reclaim of the entry) records nothing more.
    assert await intake.reclaim_once() == 0
    assert len(await open_dead_letters(db)) == 1
    assert [e for e in handlers.EFFECTS if e["run_id"] == str(run_id)] == []  # it never ran
