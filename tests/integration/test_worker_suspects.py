"""Suspects on real Postgres (R-13, R-19): the reap decision when a worker died holding several
runs, the claim paths that leave suspects alone, the isolated claim, and a worker that runs a
suspect with nothing else in flight."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunCompleted, RunCreated, RunRequeued
from awooop.eventlog.runs import create_run
from awooop.eventlog.state import RunState
from awooop.loops.runs import reap_once
from awooop.projections.registry import get
from awooop.projections.replay import replay
from awooop.runs import leases
from awooop.runs.leases import suspects
from awooop.worker.runtime import Worker
from tests.support import handlers
from tests.support.runs import create_runs, events_of, load
from tests.support.waiting import eventually

P = "proj-suspects"
Q = "proj-suspects-2"
SHORT = 0.05  # a lease that is over by the time the next statement runs


async def claim(
    db: Database, project: str, run_id: uuid.UUID, worker: str, ttl: float = SHORT
) -> RunState:
    state = await db.in_tenant(project, lambda c: leases.claim(c, run_id, worker, ttl))
    assert state is not None
    return state


async def create_claimed(
    db: Database, project: str, count: int, worker: str, payload: Any
) -> list[uuid.UUID]:
    """``count`` runs created and claimed by ``worker`` in one transaction: no other worker's
    poll can take one in between (a serving worker polls continuously)."""
    run_ids = [uuid.uuid4() for _ in range(count)]
    async with db.tenant(project) as conn:
        now = await conn.fetchval("SELECT now()")
        for run_id in run_ids:
            created = RunCreated(
                at=now,
                run_id=run_id,
                project_id=project,
                channel_type="api",
                provider_event_id=str(run_id),
                input=payload,
                max_attempts=3,
            )
            await create_run(conn, created)
            assert await leases.claim(conn, run_id, worker, SHORT) is not None
    return run_ids


async def expire(db: Database) -> None:
    """Wait until every short lease is over by the database clock."""
    await asyncio.sleep(SHORT * 2)


async def requeues(db: Database, project: str, run_id: uuid.UUID) -> list[RunRequeued]:
    return [e for e in await events_of(db, project, run_id) if isinstance(e, RunRequeued)]


async def test_a_worker_that_died_holding_several_runs_makes_them_suspects_uncharged(
    db: Database,
) -> None:
    """Runs of two projects on one worker, reaped one per pass (as separate processes would
    find them): every one is a suspect, none charged, whatever the order."""
    held = await create_runs(db, P, 2)
    [other] = await create_runs(db, Q, 1)
    for run_id in held:
        await claim(db, P, run_id, "dead-1")
    await claim(db, Q, other, "dead-1")
    await expire(db)
    for _ in range(3):  # one transaction per run
        [(_state, event)] = await db.in_platform_writes(lambda c: leases.reap(c, 1))
        assert isinstance(event, RunRequeued)
    for project, run_id in [(P, held[0]), (P, held[1]), (Q, other)]:
        state = await load(db, project, run_id)
        assert (state.status, state.attempt_count, state.max_attempts) == ("PENDING", 1, 4)
        assert state.suspect_worker_id == "dead-1"
        [event] = await requeues(db, project, run_id)
        assert event.suspect and event.worker_id == "dead-1"


async def test_replay_rebuilds_suspects_and_their_moved_ceilings(
    db: Database, database_url: str
) -> None:
    """The suspect mark and the moved max_attempts are apply() folded over the events: the
    rebuilt table equals the live one (replay run_state --verify)."""
    runs = await create_runs(db, P, 2)
    for run_id in runs:
        await claim(db, P, run_id, "dead-5")
    await expire(db)
    await reap_once(db)
    got = await db.in_platform_writes(lambda c: suspects.claim_suspect(c, "w-alone", SHORT))
    assert got is not None
    await expire(db)
    await reap_once(db)  # the suspect died alone: charged, still a suspect
    again = await load(db, P, got.run_id)
    assert (again.max_attempts, again.suspect_worker_id) == (4, "dead-5")
    report = await replay(database_url, get("run_state"))
    assert report.differences == 0, report.lines()


async def test_a_worker_that_died_holding_one_run_is_charged_to_it(db: Database) -> None:
    [alone] = await create_runs(db, P, 1)
    [finished] = await create_runs(db, P, 1)
    await claim(db, P, alone, "dead-2")
    await claim(db, P, finished, "dead-2", ttl=30)
    # The other run it held finished before it died: it was alone at its death.
    done = await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c,
            finished,
            "dead-2",
            1,
            lambda _s, now: RunCompleted(at=now, worker_id="dead-2", attempt=1, result=1),
        ),
    )
    assert done.status == "COMPLETED"
    await expire(db)
    assert await reap_once(db) == (1, 0)
    state = await load(db, P, alone)
    assert (state.status, state.max_attempts, state.suspect_worker_id) == ("PENDING", 3, None)
    [event] = await requeues(db, P, alone)
    assert not event.suspect


async def test_only_the_isolated_claim_takes_a_suspect(db: Database) -> None:
    """The stream claim, the single claim, polling and taking an expired run leave suspects
    alone; claim_suspect takes the oldest."""
    runs = await create_runs(db, P, 2)
    for run_id in runs:
        await claim(db, P, run_id, "dead-3")
    await expire(db)
    # A worker finds one of them expired: it reaps it as a suspect and does not claim it.
    taken = await db.in_platform_writes(lambda c: leases.take_expired(c, runs[0], "w-live", 30.0))
    assert taken is not None and not taken.claimed
    assert isinstance(taken.reaped, RunRequeued) and taken.reaped.suspect
    polled = await db.in_platform_writes(lambda c: leases.take_expired_batch(c, "w-live", 30, 10))
    assert [t.claimed for t in polled] == [False]
    assert await db.in_tenant(P, lambda c: leases.claim(c, runs[0], "w-live", 30)) is None
    assert await db.in_platform_writes(lambda c: leases.poll(c, "w-live", 30, 10, 0.0)) == []
    batch = await db.in_run_statement(lambda c: leases.claim_many(c, runs, "w-live", 30))
    assert batch.claimed == {}
    assert {leases.availability(s, batch.now, "w-live") for s in batch.others.values()} == {
        leases.Availability.SUSPECT
    }
    assert await db.in_platform(suspects.suspects_waiting)
    got = await db.in_platform_writes(lambda c: suspects.claim_suspect(c, "w-alone", 30))
    assert got is not None and got.run_id == runs[0] and got.worker_id == "w-alone"
    assert got.suspect_worker_id == "dead-3"  # still a suspect while it runs


@pytest.mark.connections(9)
async def test_a_worker_runs_a_suspect_with_nothing_else_in_flight(
    db: Database, fast: Settings
) -> None:
    """Burst mode: the plain runs go together (concurrency 5), the suspects one at a time,
    each with no other attempt of the worker running meanwhile."""
    handlers.EFFECTS.clear()
    shared = await create_runs(db, P, 3, payload={"sleep": 0.3})
    for run_id in shared:
        await claim(db, P, run_id, "dead-4")
    await expire(db)
    assert await reap_once(db) == (3, 0)
    plain = await create_runs(db, P, 4, payload={"sleep": 0.3})
    worker = Worker(db=db, settings=fast, handler=handlers.exits_when_told, concurrency=5)
    await worker.run_until_idle(max_s=60)
    for run_id in [*shared, *plain]:
        assert (await load(db, P, run_id)).status == "COMPLETED"
    spans = {}
    for e in handlers.EFFECTS:
        spans.setdefault(e["run_id"], {})[e["what"]] = e["t"]
    for run_id in shared:
        mine = spans[str(run_id)]
        overlapping = [
            other
            for other, times in spans.items()
            if other != str(run_id)
            and times["start"] < mine["done"]
            and times["done"] > mine["start"]
        ]
        assert overlapping == [], (run_id, overlapping)
    # The plain runs did share the worker (it is the suspects that were kept apart).
    assert any(
        spans[str(a)]["start"] < spans[str(b)]["done"]
        and spans[str(b)]["start"] < spans[str(a)]["done"]
        for a in plain
        for b in plain
        if a != b
    )


@pytest.mark.connections(14)
async def test_a_serving_worker_drains_then_runs_suspects_alone_then_takes_work_again(
    db: Database, fast: Settings
) -> None:
    """The loop of a serving worker (polling path): plain runs in flight when suspects appear
    finish first; the suspects run one at a time with nothing else; plain runs created
    meanwhile wait and then run together again."""
    handlers.EFFECTS.clear()
    worker = Worker(db=db, settings=fast, handler=handlers.exits_when_told, concurrency=5)
    stop = asyncio.Event()
    serving = asyncio.ensure_future(worker.run(stop))
    try:
        before = await create_runs(db, P, 4, payload={"sleep": 1.0})
        await eventually_status(db, before, {"RUNNING", "COMPLETED"})
        shared = await create_claimed(db, P, 2, "dead-6", payload={"sleep": 0.3})
        await expire(db)
        await reap_once(db)  # the worker's polling pass may reap one first: the same decision
        after = await create_runs(db, P, 4, payload={"sleep": 0.3})
        await eventually_status(db, [*before, *shared, *after], {"COMPLETED"})
    finally:
        stop.set()
        await asyncio.wait_for(serving, timeout=60)
    spans: dict[str, dict[str, float]] = {}
    for e in handlers.EFFECTS:
        spans.setdefault(e["run_id"], {})[e["what"]] = e["t"]
    for run_id in shared:
        mine = spans[str(run_id)]
        overlapping = [
            other
            for other, times in spans.items()
            if other != str(run_id)
            and times["start"] < mine["done"]
            and times["done"] > mine["start"]
        ]
        assert overlapping == [], (run_id, overlapping)
    for run_id in shared:
        assert (await load(db, P, run_id)).suspect_worker_id == "dead-6"
    # Then the worker took work together again.
    assert any(
        spans[str(a)]["start"] < spans[str(b)]["done"]
        and spans[str(b)]["start"] < spans[str(a)]["done"]
        for a in after
        for b in after
        if a != b
    )
    assert max(spans[str(r)]["done"] for r in before) <= min(spans[str(r)]["start"] for r in shared)


async def eventually_status(db: Database, run_ids: list[uuid.UUID], wanted: set[str]) -> None:
    async def reached() -> bool:
        found = [(await load(db, P, r)).status for r in run_ids]
        return all(status in wanted for status in found)

    await eventually(reached, timeout_s=60, what=f"runs {sorted(wanted)}")
