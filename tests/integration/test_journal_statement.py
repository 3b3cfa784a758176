"""The one-statement journal write (``journal_many.sql``, :func:`awooop.runs.leases.journal_many`)
on real Postgres: each run's row equals ``apply`` folded over its events, the stored events
equal the ones :class:`awooop.runs.leases.Journal` makes at the row's clock, the fence is checked
per run and a run refused writes nothing; a run in a tool wait, and a write of other events,
go the transactional way (:meth:`awooop.runs.leases.RunStatements.fenced_record_many`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from awooop.core.db import Database
from awooop.core.errors import LeaseLostError, UnstorableValueError
from awooop.core.events import (
    Event,
    ModelCalled,
    StepCompleted,
    ToolWaitStarted,
    decode_event,
    run_stream_id,
)
from awooop.eventlog import eventlog
from awooop.eventlog.state import RunState, RunStatus, fold
from awooop.runs import leases
from tests.support.factories import event_for
from tests.support.runs import count_events, create_runs, events_of, fence_cases, load

P = "proj-journal"
STARTED = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


async def replayed(db: Database, run_id: uuid.UUID) -> RunState | None:
    async with db.tenant(P) as conn:
        recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    return fold([decode_event(e.data) for e in recorded])


def called(at: datetime, answer: str = "ok") -> ModelCalled:
    sample = event_for("ModelCalled", None, at)
    return msgspec.structs.replace(
        sample, worker_id="w1", attempt=1, prompt="say ünïcode", answer=answer, input_tokens=3
    )


def step(at: datetime, name: str, result: object) -> StepCompleted:
    return StepCompleted(
        at=at, worker_id="w1", attempt=1, step=name, result=result, started_at=STARTED
    )


def journal(
    run_id: uuid.UUID,
    events: Callable[[datetime], Event | tuple[Event, ...]],
    metadata: dict[str, object] | None = None,
) -> leases.Journal:
    """The write of ``events`` as the worker makes it (AttemptWrites.journal)."""
    made = events(leases.JOURNAL_CLOCK)
    return leases.Journal(
        run_id,
        "w1",
        1,
        metadata=metadata,
        events=made if isinstance(made, tuple) else (made,),
    )


def made_at(write: leases.Journal, at: datetime) -> tuple[Event, ...]:
    """The events the write stands for, at the clock ``at``: the transactional way's."""
    made = write.make_event(None, at)  # type: ignore[arg-type] # a journal reads no state
    assert isinstance(made, tuple)
    return made


async def _wait_for_tool(db: Database, run_id: uuid.UUID) -> None:
    """``run_id``, claimed by w1, starts a tool wait: WAITING_TOOL, its lease still held."""
    await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c,
            run_id,
            "w1",
            1,
            lambda _s, now: ToolWaitStarted(at=now, worker_id="w1", attempt=1, tool="t"),
        ),
    )


async def test_journal_statement_matches_apply(db: Database) -> None:
    """A model call with the step it answers, a step after a recorded one (the journal keeps
    both), a model call alone, a step journaled twice in one write (the later wins, as apply
    does) and a step whose result is null: each row equals the replay, equals
    apply() of the events the write makes at the row's clock, and each event is stored as made,
    with the write's metadata."""
    runs = await create_runs(db, P, 5)
    await db.in_run_statement(lambda c: leases.claim_many(c, runs, "w1", 30))
    await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c, runs[1], "w1", 1, lambda _s, now: step(now, "first", [1, 2])
        ),
    )
    writes = [
        journal(
            runs[0], lambda at: (called(at), step(at, "ask", {"text": "a", "n": 1.5})), {"n": 0}
        ),
        journal(runs[1], lambda at: step(at, "second", "two")),
        journal(runs[2], lambda at: called(at, answer="alone")),
        journal(runs[3], lambda at: (step(at, "s", 1), step(at, "s", {"again": True}))),
        journal(runs[4], lambda at: step(at, "none", None)),
    ]
    before = {r: await load(db, P, r) for r in runs}
    written = await db.in_run_statement(lambda c: leases.journal_many(c, writes))
    assert written == {r: None for r in runs}  # each written; no row read back
    for write in writes:
        row = await load(db, P, write.run_id)
        assert row == await replayed(db, write.run_id)
        made = made_at(write, row.updated_at)
        stored = (await events_of(db, P, write.run_id))[-len(made) :]
        assert tuple(stored) == made
        assert row == fold(list(made), before[write.run_id])
        assert (row.status, row.worker_id, row.version) == (
            RunStatus.RUNNING,
            "w1",
            before[write.run_id].version + len(made),
        )
    assert (await load(db, P, runs[1])).saga_steps.keys() == {"first", "second"}
    assert (await load(db, P, runs[3])).saga_steps["s"]["result"] == {"again": True}
    async with db.platform() as conn:
        metadata = await conn.fetch(
            "SELECT metadata FROM awooop_events WHERE stream_id = $1 AND version > $2",
            run_stream_id(runs[0]),
            before[runs[0]].version,
        )
    assert [m["metadata"] for m in metadata] == [{"n": 0}, {"n": 0}]


async def test_journal_statement_refuses_what_the_fence_refuses(db: Database) -> None:
    """Each run's fence on its own row: the holder's events are written; a run another attempt
    holds, one whose lease expired, a cancelled one and an unknown one each get a
    LeaseLostError of their own; a result Postgres cannot store gets its UnstorableValueError;
    a run in a tool wait (its lease held) and a write of events that are not journal events
    are left out of the answer, for the transactional way. Nothing of any of those is written."""
    mine, stolen, expired, cancelled = await fence_cases(db, P)
    bad, waiting, other = await create_runs(db, P, 3)
    await db.in_run_statement(lambda c: leases.claim_many(c, [bad, waiting, other], "w1", 30))
    await _wait_for_tool(db, waiting)
    unknown = uuid.uuid4()
    before = {r: await load(db, P, r) for r in (stolen, expired, cancelled, bad, waiting, other)}
    writes = [
        journal(r, lambda at: step(at, "s", "ok"))
        for r in (mine, stolen, expired, cancelled, unknown)
    ]
    writes += [
        journal(bad, lambda at: step(at, "s", "nul \x00 here")),
        journal(waiting, lambda at: called(at)),
        journal(other, lambda at: ToolWaitStarted(at=at, worker_id="w1", attempt=1, tool="t")),
    ]
    answers = await db.in_run_statement(lambda c: leases.journal_many(c, writes))
    assert answers.keys() == {mine, stolen, expired, cancelled, unknown, bad}  # the rest: None
    got = [answers.get(w.run_id) for w in writes]
    assert got[0] is None and (await load(db, P, mine)).saga_steps["s"]["result"] == "ok"
    assert all(isinstance(g, LeaseLostError) for g in got[1:5])
    reasons = [str(g) for g in got[1:5]]
    assert "attempt 2 of w2" in reasons[0]
    assert "expired" in reasons[1]
    assert "CANCELLED" in reasons[2]
    assert "no such run" in reasons[3]
    assert isinstance(got[5], UnstorableValueError)
    assert (await count_events(db, "StepCompleted")) == {run_stream_id(mine): 1}
    for run_id, state in before.items():
        assert await load(db, P, run_id) == state


async def test_run_statements_write_journals_in_one_statement_and_the_rest_in_a_transaction(
    db: Database,
) -> None:
    """The worker's door (RunStatements.fenced_record_many): a journal of a RUNNING run, a
    model call of a run in a tool wait and a write of another event, in one call: each is
    written once and answered in order, and each row equals its replay."""
    running, waiting, other = await create_runs(db, P, 3)
    await db.in_run_statement(lambda c: leases.claim_many(c, [running, waiting, other], "w1", 30))
    await _wait_for_tool(db, waiting)
    writes: list[leases.FencedWrite] = [
        journal(running, lambda at: (called(at), step(at, "a", 1))),
        leases.FencedWrite(
            other,
            "w1",
            1,
            lambda _s, now: ToolWaitStarted(at=now, worker_id="w1", attempt=1, tool="t"),
        ),
        journal(waiting, lambda at: called(at)),  # a model call beside the tool wait
    ]
    answers = await leases.RunStatements(db).fenced_record_many(writes)
    assert answers[0] is None  # the journal statement reads no row back
    for write, answer in zip(writes[1:], answers[1:], strict=True):
        assert isinstance(answer, RunState) and answer.run_id == write.run_id
        assert await load(db, P, write.run_id) == answer
    for write in writes:
        assert await load(db, P, write.run_id) == await replayed(db, write.run_id)
    assert [(await load(db, P, w.run_id)).status for w in writes] == [
        RunStatus.RUNNING,
        RunStatus.WAITING_TOOL,
        RunStatus.WAITING_TOOL,
    ]
    assert (await count_events(db, "ModelCalled")) == {
        run_stream_id(running): 1,
        run_stream_id(waiting): 1,
    }
