"""The one-statement sleep (``sleep_many.sql``, :func:`awooop.runs.leases.sleep_many`) and the
timers loop's one-statement fire (``fire_many.sql``, :func:`awooop.runs.timers.fire_due`) on
real Postgres: each run's row equals ``apply`` folded over its events, the event equals the one
:class:`awooop.runs.leases.Sleep` (or the loop) makes, what the generic fenced write would have
written, the wait's row is written and removed as :func:`awooop.eventlog.waits.follow` does and
the timers loop is rung; the sleep's fence is checked per run, and a run refused writes
nothing."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import LeaseLostError
from awooop.core.events import StepCompleted, WaitStarted, decode_event, run_stream_id
from awooop.eventlog import eventlog
from awooop.eventlog.batches import Served
from awooop.eventlog.state import RunState, RunStatus, apply, fold
from awooop.eventlog.wait_state import due_of
from awooop.loops.timers import CHANNEL as TIMERS_CHANNEL
from awooop.runs import leases, pauses, timers
from awooop.runs.pauses import Scope
from awooop.worker.context import RunContext
from awooop.worker.outcomes import Outcome
from awooop.worker.runtime import Worker
from tests.support.runs import count_events, create_runs, events_of, fence_cases, load

P = "proj-sleeps"
EAST = timezone(timedelta(hours=2))


async def replayed(db: Database, run_id: uuid.UUID) -> RunState | None:
    async with db.tenant(P) as conn:
        recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    return fold([decode_event(e.data) for e in recorded])


async def _claim(db: Database, runs: list[uuid.UUID], ttl_s: float = 30) -> None:
    batch = await db.in_run_statement(lambda c: leases.claim_many(c, runs, "w1", ttl_s))
    assert set(batch.claimed) == set(runs)


async def test_sleep_statement_matches_apply(db: Database, settings: Settings) -> None:
    """Sleeps of a delay (whole seconds, and with microseconds), until a time given in another
    offset (whole seconds, and with microseconds), and one after a recorded step: each row
    equals the replay and the answer, the last event equals Sleep.event applied to the state
    before it, the journal's due time is the event's as apply writes it, and the wait's row is
    waits.follow's. The timers loop's channel hears of the new waits."""
    runs = await create_runs(db, P, 5)
    await _claim(db, runs)
    await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c,
            runs[4],
            "w1",
            1,
            lambda _s, now: StepCompleted(at=now, worker_id="w1", attempt=1, step="s", result=1),
        ),
    )
    sleeps = [
        leases.Sleep(runs[0], "w1", 1, {"n": 0}, step="sleep:1", delay=timedelta(seconds=2)),
        leases.Sleep(runs[1], "w1", 1, step="nap", delay=timedelta(seconds=1, microseconds=7)),
        leases.Sleep(
            runs[2], "w1", 1, step="sleep:1", until=datetime(2031, 1, 2, 3, 4, 5, tzinfo=EAST)
        ),
        leases.Sleep(
            runs[3], "w1", 1, step="sleep:2", until=datetime(2031, 1, 2, 3, 4, 5, 60, tzinfo=UTC)
        ),
        leases.Sleep(runs[4], "w1", 1, step="sleep:1", delay=timedelta(days=1, milliseconds=5)),
    ]
    listener = await asyncpg.connect(settings.database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(TIMERS_CHANNEL, lambda *a: heard.put_nowait(str(a[3])))
    try:
        before = {r: await load(db, P, r) for r in runs}
        written = await db.in_run_statement(lambda c: leases.sleep_many(c, sleeps))
        rung = float(await asyncio.wait_for(heard.get(), 30))
    finally:
        await listener.close()
    assert 0 < rung <= 2  # the earliest new wait, runs[1]'s, in seconds
    for sleep, state in zip(sleeps, written, strict=True):
        assert isinstance(state, RunState)
        row = await load(db, P, sleep.run_id)
        assert row == state == await replayed(db, sleep.run_id)
        [*_, event] = await events_of(db, P, sleep.run_id)
        assert isinstance(event, WaitStarted)
        made = sleep.event(before[sleep.run_id], event.at)
        assert event == made
        assert row == apply(before[sleep.run_id], made)
        assert (row.status, row.worker_id, row.lease_until, row.waiting_for) == (
            RunStatus.WAITING_EVENT,
            None,
            None,
            "sleep",
        )
        entry = row.saga_steps[sleep.step]
        assert event.due_at is not None and entry["due_at"] == event.due_at.isoformat()
        assert due_of(entry) == made.due_at
        async with db.platform() as conn:
            wait = await conn.fetchrow(
                "SELECT * FROM awooop_run_waits WHERE run_id = $1", sleep.run_id
            )
        assert wait is not None
        assert (wait["project_id"], wait["step"], wait["kind"], wait["name"]) == (
            P,
            sleep.step,
            "sleep",
            None,
        )
        assert (wait["due_at"], wait["started_at"]) == (made.due_at, event.at)
    assert "s" in (await load(db, P, runs[4])).saga_steps  # the recorded step is kept
    assert (await load(db, P, runs[2])).saga_steps["sleep:1"]["due_at"] == (
        "2031-01-02T01:04:05+00:00"
    )
    async with db.platform() as conn:
        metadata = await conn.fetchval(
            "SELECT metadata FROM awooop_events WHERE event_type = 'WaitStarted' "
            "AND stream_id = $1",
            run_stream_id(runs[0]),
        )
    assert metadata == {"n": 0}


async def test_sleep_statement_refuses_what_the_fence_refuses(db: Database) -> None:
    """Each run's fence on its own row: the holder sleeps; a run another attempt holds, one
    whose lease expired, a cancelled one and an unknown one each get a LeaseLostError of
    their own, and nothing of them is written (no event, no wait, the row as it was)."""
    mine, stolen, expired, cancelled = await fence_cases(db, P)
    unknown = uuid.uuid4()
    refused = (stolen, expired, cancelled, unknown)
    before = {r: await load(db, P, r) for r in refused if r != unknown}
    got = await db.in_run_statement(
        lambda c: leases.sleep_many(
            c,
            [
                leases.Sleep(r, "w1", 1, step="sleep:1", delay=timedelta(seconds=5))
                for r in (mine, *refused)
            ],
        )
    )
    assert isinstance(got[0], RunState) and got[0].status == RunStatus.WAITING_EVENT
    assert all(isinstance(g, LeaseLostError) for g in got[1:])
    reasons = [str(g) for g in got[1:]]
    assert "attempt 2 of w2" in reasons[0]
    assert "expired" in reasons[1]
    assert "CANCELLED" in reasons[2]
    assert "no such run" in reasons[3]
    assert [g.details["run_id"] for g in got[1:] if isinstance(g, LeaseLostError)] == list(refused)
    assert (await count_events(db, "WaitStarted")) == {f"run-{mine}": 1}
    async with db.platform() as conn:
        waits = await conn.fetch("SELECT run_id FROM awooop_run_waits WHERE project_id = $1", P)
    assert [w["run_id"] for w in waits] == [mine]
    for run_id, state in before.items():
        assert await load(db, P, run_id) == state


@pytest.mark.connections(16)
async def test_a_workers_sleeps_are_written_by_the_one_statement(
    db: Database, settings: Settings
) -> None:
    """An in-process worker whose runs record a step, then sleep: the sleeps go through the
    worker's group commit of sleeps (sleep_many), not the generic fenced write, and each run
    is WAITING_EVENT with its row equal to its replay."""
    runs = await create_runs(db, P, 6)

    async def handler(run: RunContext) -> None:
        await run.step("fetch", lambda: asyncio.sleep(0, result=1))
        await run.sleep(timedelta(hours=1))

    quick = msgspec.structs.replace(settings, poll_interval_s=0.2, shutdown_grace_s=1.0)
    w = Worker(db=db, settings=quick, handler=handler, concurrency=len(runs))
    assert await w.run_until_idle(max_s=60) == len(runs)
    assert w.executor.finished[Outcome.WAITING_EVENT] == len(runs)
    assert w.executor.last_writes.sleeps.items == len(runs)
    assert w.executor.writes.items == len(runs)  # the steps only
    for run_id in runs:
        row = await load(db, P, run_id)
        assert (row.status, row.waiting_for) == (RunStatus.WAITING_EVENT, "sleep")
        assert row == await replayed(db, run_id)
        assert set(row.saga_steps) == {"fetch", "sleep:1"}


async def test_fire_statement_matches_apply(db: Database) -> None:
    """FIRE_MANY (the timers loop's write) is apply(state, TimerFired) in SQL: a sleep that is
    due ends "fired", an event wait's timeout "timeout", a step recorded before stays; each row
    equals the replay and apply() of the event the loop made, the waits' rows are gone, the
    events carry the loop's metadata, and a wait not due yet is left alone."""
    due, later, waiting = await create_runs(db, P, 3)
    await _claim(db, [due, later, waiting])
    await db.in_run_statement(
        lambda c: leases.sleep_many(
            c,
            [
                leases.Sleep(due, "w1", 1, step="sleep:1", delay=timedelta(0)),
                leases.Sleep(later, "w1", 1, step="sleep:1", delay=timedelta(hours=1)),
            ],
        )
    )

    def event_wait(_s: RunState, now: datetime) -> WaitStarted:
        return WaitStarted(
            at=now,
            worker_id="w1",
            attempt=1,
            step="event:paid:1",
            kind="event",
            name="paid",
            match={"order": 1},
            due_at=now,
        )

    await db.in_tenant(P, lambda c: leases.fenced_record(c, waiting, "w1", 1, event_wait))
    before = {r: await load(db, P, r) for r in (due, waiting)}
    fired = await db.in_platform_writes(lambda c: timers.fire_due(c, 10, {"by": "test"}))
    assert sorted(s.run_id for s, _ in fired) == sorted([due, waiting])
    for state, event in fired:
        row = await load(db, P, state.run_id)
        assert row == state == await replayed(db, state.run_id)
        assert row == apply(before[state.run_id], event)
        [*_, logged] = await events_of(db, P, state.run_id)
        assert logged == event
        assert row.status == RunStatus.RESUMED and row.waiting_for is None
    assert (await load(db, P, due)).saga_steps["sleep:1"]["ended"] == "fired"
    assert (await load(db, P, waiting)).saga_steps["event:paid:1"]["ended"] == "timeout"
    assert (await load(db, P, later)).status == RunStatus.WAITING_EVENT
    async with db.platform() as conn:
        left = await conn.fetch("SELECT run_id FROM awooop_run_waits WHERE project_id = $1", P)
        metadata = await conn.fetch(
            "SELECT metadata FROM awooop_events WHERE event_type = 'TimerFired'"
        )
    assert [w["run_id"] for w in left] == [later]
    assert [m["metadata"] for m in metadata] == [{"by": "test"}] * 2


async def _left_sleeping(db: Database, runs: list[uuid.UUID], delays: list[timedelta]) -> None:
    await _claim(db, runs)
    sleeps = [
        leases.Sleep(r, "w1", 1, step="sleep:1", delay=d) for r, d in zip(runs, delays, strict=True)
    ]
    await db.in_run_statement(lambda c: leases.sleep_many(c, sleeps))


async def _meta_after(db: Database, state: RunState) -> list[tuple[str, str]]:
    """The events written after ``state``, with their metadata's ``by``."""
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT event_type, metadata->>'by' AS by FROM awooop_events WHERE stream_id = $1 "
            "AND version > $2 ORDER BY version",
            run_stream_id(state.run_id),
            state.version,
        )
    return [(r["event_type"], r["by"]) for r in rows]


async def test_fire_claim_statement_matches_apply(db: Database) -> None:
    """FIRE_CLAIM (a worker's fire of its own sleeps) is apply(state, TimerFired) and then
    apply(state, RunClaimed) in SQL: a due sleep at the version named ends "fired" and the run
    is RUNNING under the worker's lease at the next attempt, the row equals the replay and apply()
    of the two logged events, both carry the metadata, the stream head is at the last and the
    wait's row is gone; a run named at another version, or whose sleep is not due, is left
    alone."""
    due, later, moved = await create_runs(db, P, 3)
    await _left_sleeping(db, [due, later, moved], [timedelta(0), timedelta(hours=1), timedelta(0)])
    before = {r: await load(db, P, r) for r in (due, later, moved)}
    held = [(due, before[due].version), (later, before[later].version)]
    held.append((moved, before[moved].version - 1))  # not the version it sleeps at
    written = await leases.RunStatements(db).fire_claim(held, "w2", 30, {"by": "test"})
    assert [(s.run_id, claimed) for s, claimed in written] == [(due, True)]
    [(state, _)] = written
    row = await load(db, P, due)
    assert row == state == await replayed(db, due)
    *_, fired, claimed = await events_of(db, P, due)
    assert row == apply(apply(before[due], fired), claimed)
    assert row.status == RunStatus.RUNNING and row.worker_id == "w2"
    assert row.attempt_count == 2 and row.version == before[due].version + 2
    assert row.saga_steps["sleep:1"]["ended"] == "fired"
    assert await _meta_after(db, before[due]) == [("TimerFired", "test"), ("RunClaimed", "test")]
    async with db.platform() as conn:
        head = await conn.fetchval(
            "SELECT version FROM awooop_event_streams WHERE stream_id = $1", run_stream_id(due)
        )
        left = await conn.fetchval(
            "SELECT count(*) FROM awooop_run_waits WHERE run_id = ANY($1::uuid[])",
            [due, later, moved],
        )
    assert head == row.version and left == 2
    assert await load(db, P, later) == before[later] and await load(db, P, moved) == before[moved]


async def test_fire_claim_leaves_a_run_a_claim_may_not_take_fired(db: Database) -> None:
    """A due sleep whose run a claim may not take now (its project paused, or a worker that
    does not serve its project) is fired and left RESUMED for the stream's delivery to claim,
    as the timers loop leaves it: one TimerFired, no RunClaimed, the row equal to apply()."""
    paused, other = "proj-sleeps-paused", P
    [held_back] = await create_runs(db, paused, 1)
    [unserved] = await create_runs(db, other, 1)
    await _left_sleeping(db, [held_back, unserved], [timedelta(0), timedelta(0)])
    await db.in_tenant(
        paused,
        lambda c: pauses.pause(c, paused, Scope.PROJECT, "", reason="test", actor="test"),
    )
    before = {r: await load(db, p, r) for r, p in ((held_back, paused), (unserved, other))}
    statements = leases.RunStatements(db)
    served = Served(projects=[paused])  # serves the paused project only
    written = await statements.fire_claim(
        [(r, s.version) for r, s in before.items()], "w2", 30, {"by": "test"}, served=served
    )
    assert sorted((s.run_id, claimed) for s, claimed in written) == sorted(
        [(held_back, False), (unserved, False)]
    )
    for run_id, project in ((held_back, paused), (unserved, other)):
        row = await load(db, project, run_id)
        *_, fired = await events_of(db, project, run_id)
        assert row == apply(before[run_id], fired) and row.status == RunStatus.RESUMED
        assert row.version == before[run_id].version + 1 and row.worker_id != "w2"
        assert await _meta_after(db, before[run_id]) == [("TimerFired", "test")]
