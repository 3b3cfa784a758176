"""A worker fires the sleeps its attempts started (awooop.worker.local_timers) and the timers loop
is the fallback after its grace (docs/workers.md, Durable sleep). Real Postgres and Redis:

- ``fire_claim.sql`` fires (and claims) a run's due sleep only at the version the worker left it
  at, once, never before it is due, and skips a row another transaction holds without waiting
  for it; the loop's ``fire_due`` leaves a wait alone until its grace has passed;
- a streams worker with the relay and NO timers loop: every sleep is fired by the worker, each
  run is claimed twice (its two attempts) and never from the stream's ``TimerFired`` too, and
  every stream entry is acknowledged.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.eventlog import batches
from awooop.runs import leases, timers
from awooop.streams.envelope import FIELD, decode_envelope
from awooop.streams.keys import WORKER_GROUP
from awooop.streams.relay import Relay
from awooop.worker.assembly import build_worker
from tests.support.durable_handlers import sleeper
from tests.support.runs import all_finished, create_runs, events_of
from tests.support.sleepers import analyze, sleepers
from tests.support.streams import keys_for, running_relay
from tests.support.waiting import eventually

P = "proj-local-timers"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def fire_claim(db: Database, held: list[tuple[uuid.UUID, int]]) -> list[uuid.UUID]:
    written = await leases.RunStatements(db).fire_claim(held, "w1", 30)
    assert all(claimed for _state, claimed in written)
    return [state.run_id for state, _claimed in written]


async def open_waits(db: Database, run_ids: list[uuid.UUID]) -> int:
    async with db.platform() as conn:
        found = await conn.fetchval(
            "SELECT count(*) FROM awooop_run_waits WHERE run_id = ANY($1::uuid[])", run_ids
        )
    return int(found)


async def test_a_held_sleep_fires_once_at_its_version_and_only_when_due(db: Database) -> None:
    now = datetime.now(UTC)
    [due] = await sleepers(db, P, 1, now - timedelta(seconds=1))
    [later] = await sleepers(db, P, 1, now + timedelta(minutes=5))
    assert await fire_claim(db, [(due, 2)]) == []  # not the version it was left at
    assert await fire_claim(db, [(later, 3)]) == []  # not due yet
    assert await fire_claim(db, [(due, 3), (later, 3)]) == [due]
    assert await fire_claim(db, [(due, 3)]) == []  # fired: the run moved on
    types = [type(e).__name__ for e in await events_of(db, P, due)]
    assert types == ["TimerFired", "RunClaimed"]  # the rows were written straight before
    assert await open_waits(db, [due, later]) == 1  # the later one still waits


async def test_a_held_sleep_another_transaction_holds_is_skipped_not_waited_for(
    db: Database,
) -> None:
    [run_id] = await sleepers(db, P, 1, datetime.now(UTC) - timedelta(seconds=1))
    async with db.platform_writes() as conn, conn.transaction():
        await conn.execute("SELECT 1 FROM awooop_run_state WHERE run_id = $1 FOR UPDATE", run_id)
        fired = await asyncio.wait_for(fire_claim(db, [(run_id, 3)]), 5)
    assert fired == []
    assert await fire_claim(db, [(run_id, 3)]) == [run_id]  # free again: fired once


async def test_the_loop_leaves_a_due_wait_to_its_worker_for_the_grace(db: Database) -> None:
    [run_id] = await sleepers(db, P, 1, datetime.now(UTC) - timedelta(seconds=1))
    early = await db.in_platform_writes(lambda c: timers.fire_due(c, 10, grace_s=30.0))
    assert early == []
    due_in = await db.in_platform_writes(lambda c: timers.next_due_in(c, 30.0))
    assert due_in is not None and 27.0 < due_in <= 29.0  # due 1 s ago: the loop's in ~29 s
    fired = await db.in_platform_writes(lambda c: timers.fire_due(c, 10, grace_s=0.5))
    assert [state.run_id for state, _ in fired] == [run_id]


@pytest.mark.parametrize("concurrency", [4, 1])
@pytest.mark.connections(17)
async def test_a_streams_worker_fires_its_own_sleeps_without_the_timers_loop(
    db: Database, fast: Settings, redis: Any, concurrency: int
) -> None:
    """Six sleeps: with four slots (and with one, where the sleeps due while its slot is busy
    wait for it), every sleep is fired and claimed by the worker, no run is claimed more than
    its two attempts need, every entry is acknowledged, and the work stream carries no
    TimerFired (each run was claimed in the transaction that fired it)."""
    keys = keys_for(fast)
    parts = build_worker(
        db=db, settings=fast, handler=sleeper, redis=redis, keys=keys, concurrency=concurrency
    )
    claims_before = sample("awooop_lease_claims_total", path="timer")
    fired_before = sample("awooop_worker_timers_fired_total")
    stop = asyncio.Event()
    async with running_relay(Relay(settings=fast, redis=redis, keys=keys), fast):
        task = asyncio.create_task(parts.run(stop))
        try:
            run_ids = await create_runs(db, P, 6, payload={"sleep_s": 0.5})
            await eventually(lambda: all_finished(db, run_ids), timeout_s=30, what="all woke")
            stream = keys.work_stream(keys.shard_of(P))
            await eventually(
                lambda: pending(redis, stream), equals=0, what="every entry acknowledged"
            )
            # Fired and claimed in one transaction: the relay told no worker of those runs.
            work = [decode_envelope(f[FIELD]).event_type for _, f in await redis.xrange(stream)]
            assert "TimerFired" not in work and work.count("RunCreated") == 6, work
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    assert sample("awooop_worker_timers_fired_total") - fired_before == 6
    assert sample("awooop_lease_claims_total", path="timer") - claims_before == 6
    for run_id in run_ids:
        history = await events_of(db, P, run_id)
        types = Counter(type(e).__name__ for e in history)
        assert types["RunClaimed"] == 2 and types["TimerFired"] == 1, types
        assert types["RunCompleted"] == 1, types
        [wait] = [e for e in history if type(e).__name__ == "WaitStarted"]
        [fired] = [e for e in history if type(e).__name__ == "TimerFired"]
        assert fired.at >= wait.due_at  # never early
    assert await open_waits(db, run_ids) == 0


async def pending(redis: Any, stream: str) -> int:
    summary = await redis.xpending(stream, WORKER_GROUP)
    return int(summary["pending"])


@pytest.mark.parametrize("analyzed", [True, False])
async def test_the_fire_reads_the_named_runs_by_their_key_however_many_sleep(
    db: Database, database_url: str, analyzed: bool
) -> None:
    """5,000 runs sleep; a worker fires 10 of them: the generic plan (the run pool keeps one)
    locks them through the primary key, never walking the sleeping runs."""
    later = datetime.now(UTC) + timedelta(hours=1)
    await sleepers(db, P, 5000, later)
    mine = await sleepers(db, P, 10, datetime.now(UTC) - timedelta(seconds=1))
    if analyzed:  # the statistics as autovacuum leaves them, and as a burst of sleeps finds them
        await analyze(database_url)
    async with db.platform_writes() as conn:
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS) " + batches.FIRE_CLAIM,
                mine,
                [3] * 10,
                "w1",
                30.0,
                True,
                *batches.EVERY,
                "{}",
            )
        )
    assert "awooop_run_state_pkey" in plan, plan
    assert "awooop_run_state_status" not in plan, plan
    assert "Seq Scan on awooop_run_state" not in plan, plan
    scanned = [
        int(m[1]) * int(m[2])
        for line in plan.splitlines()
        if "Scan" in line
        and "on awooop_run_state" in line
        and (m := re.search(r"actual time=\S+ rows=(\d+) loops=(\d+)", line))
    ]
    assert scanned and max(scanned) <= len(mine), plan  # the named runs, not the 5,000
