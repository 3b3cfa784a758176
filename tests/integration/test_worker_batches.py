"""The batched write path on real Postgres: append_many, apply_and_store_many, claim_many and
fenced_record_many keep the row equal to apply() folded over the events, and refuse exactly
what the single versions refuse."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from awooop.core.db import Database
from awooop.core.errors import LeaseLostError, StreamOrderConflictError, VersionConflictError
from awooop.core.events import (
    ApprovalGranted,
    RunCompleted,
    StepCompleted,
    decode_event,
    run_stream_id,
)
from awooop.eventlog import eventlog
from awooop.eventlog.runs import apply_and_store_many
from awooop.eventlog.state import RunState, fold
from awooop.runs import leases, run_rows
from awooop.runs.leases import Availability
from tests.support.runs import count_events, create_runs, fence_cases, load

P = "proj-b"


async def replayed(db: Database, run_id: uuid.UUID) -> RunState | None:
    async with db.tenant(P) as conn:
        recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    return fold([decode_event(e.data) for e in recorded])


async def test_claim_many_takes_only_claimable_runs_and_matches_replay(db: Database) -> None:
    free = await create_runs(db, P, 5)
    [taken] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, taken, "other", 30)) is not None
    unknown = uuid.uuid4()
    batch = await db.in_tenant(
        P, lambda c: leases.claim_many(c, [*free, taken, unknown], "w1", 30, {"k": 1})
    )
    claimed = batch.claimed
    assert set(claimed) == set(free)
    assert set(batch.others) == {taken}  # the unknown run has no state at all
    assert leases.availability(batch.others[taken], batch.now, "w1") is Availability.HELD
    for run_id in free:
        row = await load(db, P, run_id)
        assert row == claimed[run_id] == await replayed(db, run_id)
        assert (row.status, row.worker_id, row.attempt_count) == ("RUNNING", "w1", 1)
    assert (await load(db, P, taken)).worker_id == "other"


async def test_claim_statement_matches_apply(db: Database) -> None:
    """CLAIM_MANY writes apply(state, RunClaimed) in SQL: after a first attempt was reaped
    (attempt 2, reaped_at set) and on a fresh run, on its own outside a transaction (as the
    worker runs it), the row equals the events folded by apply() and carries the metadata."""
    fresh, reaped = await create_runs(db, P, 2)
    assert await db.in_tenant(P, lambda c: leases.claim(c, reaped, "w0", 0.001))
    await asyncio.sleep(0.01)  # the 1 ms lease runs out
    assert [s.run_id for s, _e in await db.in_platform_writes(lambda c: leases.reap(c, 10))] == [
        reaped
    ]
    batch = await db.in_run_statement(
        lambda c: leases.claim_many(c, [fresh, reaped], "w1", 12.5, [{"k": 1}, None])
    )
    assert set(batch.claimed) == {fresh, reaped}
    for run_id, attempt in ((fresh, 1), (reaped, 2)):
        row = await load(db, P, run_id)
        assert row == batch.claimed[run_id] == await replayed(db, run_id)
        assert (row.status, row.worker_id, row.attempt_count) == ("RUNNING", "w1", attempt)
        assert row.lease_until is not None and row.heartbeat_at is not None
        assert (row.lease_until - row.heartbeat_at).total_seconds() == 12.5
    assert (await load(db, P, reaped)).reaped_at is not None
    async with db.tenant(P) as conn:
        [event] = [
            e
            for e in await eventlog.read_stream(conn, run_stream_id(fresh))
            if e.event_type == "RunClaimed"
        ]
    assert event.metadata == {"k": 1}


async def test_claim_statement_leaves_a_run_whose_stream_a_newer_transaction_wrote(
    db: Database,
) -> None:
    [run_id] = await create_runs(db, P)
    async with db.platform_writes() as conn:  # as if a transaction newer than any claim wrote it
        await conn.execute(
            "UPDATE awooop_event_streams "
            "SET last_tx_id = (pg_current_xact_id()::text::bigint + 1000000)::text::xid8 "
            "WHERE stream_id = $1",
            run_stream_id(run_id),
        )
    batch = await db.in_run_statement(lambda c: leases.claim_many(c, [run_id], "w1", 30))
    assert batch.claimed == {}
    assert leases.availability(batch.others[run_id], batch.now, "w1") is Availability.CLAIMABLE
    row = await load(db, P, run_id)
    assert (row.status, row.version, row.attempt_count) == ("PENDING", 1, 0)
    assert await count_events(db, "RunClaimed") == {}


async def test_complete_statement_matches_apply(db: Database) -> None:
    """COMPLETE_MANY writes apply(state, RunCompleted) in SQL, with the result (None stays SQL
    NULL, as the generic write stores it) and the metadata; the rows equal the replay."""
    runs = await create_runs(db, P, 3)
    await db.in_run_statement(lambda c: leases.claim_many(c, runs, "w1", 30))
    results: list[object] = [{"answer": [1, 2.5, "x"]}, None, "done"]
    written = await db.in_run_statement(
        lambda c: leases.complete_many(
            c,
            [
                leases.Completion(r, "w1", 1, result, {"n": i})
                for i, (r, result) in enumerate(zip(runs, results, strict=True))
            ],
        )
    )
    assert written == [None, None, None]  # each written; no row read back
    for run_id, result in zip(runs, results, strict=True):
        row = await load(db, P, run_id)
        assert row == await replayed(db, run_id)
        assert (row.status, row.result, row.worker_id, row.lease_until) == (
            "COMPLETED",
            result,
            None,
            None,
        )
        assert row.finished_at == row.updated_at
    async with db.platform() as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM awooop_run_state WHERE run_id = $1 AND result IS NULL", runs[1]
        )
        metas = await conn.fetch(
            "SELECT metadata FROM awooop_events WHERE event_type = 'RunCompleted' ORDER BY position"
        )
    assert sorted(m["metadata"]["n"] for m in metas) == [0, 1, 2]
    assert sorted((await count_events(db, "RunCompleted")).values()) == [1, 1, 1]


async def test_complete_statement_refuses_what_the_fence_refuses(db: Database) -> None:
    mine, stolen, expired, cancelled = await fence_cases(db, P)
    unknown = uuid.uuid4()
    got = await db.in_run_statement(
        lambda c: leases.complete_many(
            c,
            [
                leases.Completion(r, "w1", 1, "ok")
                for r in (mine, stolen, expired, cancelled, unknown)
            ],
        )
    )
    assert got[0] is None and (await load(db, P, mine)).status == "COMPLETED"
    reasons = [str(g) for g in got[1:]]
    assert all(isinstance(g, LeaseLostError) for g in got[1:])
    assert "attempt 2 of w2" in reasons[0]
    assert "expired" in reasons[1]
    assert "CANCELLED" in reasons[2]
    assert "no such run" in reasons[3]
    assert (await count_events(db, "RunCompleted")) == {run_stream_id(mine): 1}
    for run_id in (stolen, expired):
        assert (await load(db, P, run_id)).status == "RUNNING"


@pytest.mark.connections(9)
async def test_concurrent_claim_batches_never_share_a_run(db: Database) -> None:
    run_ids = await create_runs(db, P, 50)
    results = await asyncio.gather(
        *(
            db.in_tenant(P, lambda c, w=f"w{i}": leases.claim_many(c, run_ids, w, 30))
            for i in range(6)
        )
    )
    owners = [r for batch in results for r in batch.claimed]
    assert sorted(owners) == sorted(run_ids)
    assert sorted((await count_events(db, "RunClaimed")).values()) == [1] * 50


async def test_fenced_record_many_writes_the_holders_and_refuses_the_rest(db: Database) -> None:
    mine, stolen, finished = await create_runs(db, P, 3)
    for run_id in (mine, stolen, finished):
        assert await db.in_tenant(P, lambda c, r=run_id: leases.claim(c, r, "w1", 30))
    async with db.platform_writes() as conn:  # another worker took "stolen" (attempt 2)
        await conn.execute(
            "UPDATE awooop_run_state SET worker_id = 'w2', attempt_count = 2 WHERE run_id = $1",
            stolen,
        )
    await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c, finished, "w1", 1, lambda _s, now: RunCompleted(at=now, worker_id="w1", attempt=1)
        ),
    )

    def step(run_id: uuid.UUID) -> leases.FencedWrite:
        return leases.FencedWrite(
            run_id,
            "w1",
            1,
            lambda _s, now: StepCompleted(at=now, worker_id="w1", attempt=1, step="s", result=2),
            {"traceparent": f"tp-{run_id}"},
        )

    results = await db.in_tenant(
        P, lambda c: leases.fenced_record_many(c, [step(stolen), step(mine), step(finished)])
    )
    assert isinstance(results[0], LeaseLostError) and "no longer holds" in results[0].message
    assert isinstance(results[1], RunState) and results[1].saga_steps["s"]["result"] == 2
    assert isinstance(results[2], LeaseLostError) and "COMPLETED" in results[2].message
    assert await load(db, P, mine) == results[1] == await replayed(db, mine)
    async with db.tenant(P) as conn:
        recorded = await eventlog.read_stream(conn, run_stream_id(mine))
    assert recorded[-1].metadata == {"traceparent": f"tp-{mine}"}


async def test_append_many_refuses_a_stale_expected_version(db: Database) -> None:
    a, b = await create_runs(db, P, 2)
    grant = ApprovalGranted(at=(await load(db, P, a)).created_at, actor="x")
    with pytest.raises(VersionConflictError):
        async with db.tenant(P) as conn:
            await eventlog.append_many(
                conn, [(run_stream_id(a), P, 1, grant), (run_stream_id(b), P, 0, grant)]
            )
    async with db.tenant(P) as conn:  # the transaction rolled back: nothing of either
        assert len(await eventlog.read_stream(conn, run_stream_id(a))) == 1
    with pytest.raises(ValueError, match="consecutive versions"):
        async with db.tenant(P) as conn:
            await eventlog.append_many(
                conn, [(run_stream_id(a), P, 1, grant), (run_stream_id(a), P, 3, grant)]
            )


async def test_append_many_refuses_a_writer_older_than_the_streams_last(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    stream = run_stream_id(run_id)
    grant = ApprovalGranted(at=(await load(db, P, run_id)).created_at, actor="x")
    async with db.tenant(P) as old:
        await old.execute("SELECT pg_current_xact_id()")  # the older transaction id
        async with db.tenant(P) as new:
            await eventlog.append(new, stream, P, 1, [grant])
        with pytest.raises(StreamOrderConflictError):
            await eventlog.append_many(old, [(stream, P, 2, grant)])


async def test_apply_and_store_many_equals_the_single_version(db: Database) -> None:
    run_ids = await create_runs(db, P, 4)
    async with db.tenant(P) as conn:
        locked = [await run_rows.lock(conn, r) for r in run_ids]
        changes = [(s, leases.claim_event(s, now, "w1", 30)) for s, now in locked]
        new = await apply_and_store_many(conn, changes, [None, {"a": 1}, None, None])
    for state in new:
        assert await load(db, P, state.run_id) == state == await replayed(db, state.run_id)
