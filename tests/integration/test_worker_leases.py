"""Leases on real Postgres: claim, heartbeat, fence, poll, take, reap (R-11, R-12, R-13)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from awooop.core.db import Database
from awooop.core.errors import LeaseLostError
from awooop.core.events import RunCompleted, RunFailed, RunRequeued, StepCompleted, run_stream_id
from awooop.eventlog.state import MAX_ATTEMPTS_REASON, RunState
from awooop.loops.runs import reap_once
from awooop.runs import approvals, leases
from tests.support.runs import count_events, create_runs, event_types, events_of, load

P = "proj-a"
SHORT = 0.05  # a lease that is over by the time the next statement runs


async def claim(db: Database, run_id: uuid.UUID, worker: str, ttl: float = 30.0) -> RunState | None:
    return await db.in_tenant(P, lambda c: leases.claim(c, run_id, worker, ttl))


async def complete(db: Database, run_id: uuid.UUID, worker: str, attempt: int) -> RunState:
    return await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c,
            run_id,
            worker,
            attempt,
            lambda _s, now: RunCompleted(at=now, worker_id=worker, attempt=attempt, result=1),
        ),
    )


@pytest.mark.connections(14)
async def test_ten_concurrent_claimers_one_lease(db: Database) -> None:
    for _ in range(5):
        [run_id] = await create_runs(db, P)
        results = await asyncio.gather(*(claim(db, run_id, f"w{i}") for i in range(10)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        assert winners[0].status == "RUNNING" and winners[0].attempt_count == 1
        assert (await event_types(db, P, run_id)).count("RunClaimed") == 1


async def test_the_claim_sets_the_lease_from_the_database_clock(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    async with db.tenant(P) as conn:
        before = await conn.fetchval("SELECT now()")
    state = await claim(db, run_id, "w1", ttl=30)
    assert state is not None and state.lease_until is not None and state.heartbeat_at is not None
    assert state.heartbeat_at >= before
    assert (state.lease_until - state.heartbeat_at).total_seconds() == pytest.approx(30)
    assert state.worker_id == "w1"
    assert await claim(db, run_id, "w2") is None  # RUNNING: not claimable


async def test_heartbeat_renews_only_the_workers_live_leases_and_writes_no_event(
    db: Database,
) -> None:
    mine = await create_runs(db, P, 3)
    [theirs] = await create_runs(db, P)
    for run_id in mine:
        assert await claim(db, run_id, "w1") is not None
    assert await claim(db, theirs, "w2") is not None
    before = {r: await load(db, P, r) for r in [*mine, theirs]}
    await asyncio.sleep(0.01)  # time moves on: a renewal sets a later lease_until
    renewed = await db.in_platform_writes(
        lambda c: leases.heartbeat(c, "w1", dict.fromkeys([*mine, theirs], 1), 60)
    )
    assert renewed == set(mine)
    for run_id in mine:
        after = await load(db, P, run_id)
        old = before[run_id]
        assert after.lease_until is not None and old.lease_until is not None
        assert after.lease_until > old.lease_until
        assert after.version == old.version  # no event
        assert await event_types(db, P, run_id) == ["RunCreated", "RunClaimed"]
    assert await load(db, P, theirs) == before[theirs]


async def test_an_expired_lease_is_not_revived_by_a_heartbeat(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    assert await claim(db, run_id, "w1", ttl=SHORT) is not None
    await asyncio.sleep(SHORT * 2)
    assert (
        await db.in_platform_writes(lambda c: leases.heartbeat(c, "w1", {run_id: 1}, 30)) == set()
    )


async def test_a_stale_attempt_cannot_complete_after_another_took_the_run(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    first = await claim(db, run_id, "stale", ttl=SHORT)
    assert first is not None
    await asyncio.sleep(SHORT * 2)
    assert await reap_once(db) == (1, 0)
    second = await claim(db, run_id, "fresh")
    assert second is not None and second.attempt_count == 2
    with pytest.raises(LeaseLostError) as refused:
        await complete(db, run_id, "stale", 1)
    assert refused.value.code == "E-RUN-002"
    assert "no longer holds" in refused.value.message
    done = await complete(db, run_id, "fresh", 2)
    assert done.status == "COMPLETED"
    assert (await count_events(db, "RunCompleted"))[run_stream_id(run_id)] == 1


async def test_an_expired_lease_refuses_writes_before_the_reaper_runs(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    assert await claim(db, run_id, "w1", ttl=SHORT) is not None
    await asyncio.sleep(SHORT * 2)
    with pytest.raises(LeaseLostError, match="expired"):
        await db.in_tenant(
            P,
            lambda c: leases.fenced_record(
                c,
                run_id,
                "w1",
                1,
                lambda _s, now: StepCompleted(at=now, worker_id="w1", attempt=1, step="s"),
            ),
        )
    assert (await load(db, P, run_id)).saga_steps == {}


async def test_reaper_requeues_until_max_attempts_then_fails(db: Database) -> None:
    [run_id] = await create_runs(db, P, max_attempts=3)
    for attempt in (1, 2, 3):
        state = await claim(db, run_id, f"w{attempt}", ttl=SHORT)
        assert state is not None and state.attempt_count == attempt
        await asyncio.sleep(SHORT * 2)
        requeued, failed = await reap_once(db)
        assert (requeued, failed) == ((1, 0) if attempt < 3 else (0, 1))
    final = await load(db, P, run_id)
    assert final.status == "FAILED"
    assert final.failure_reason is not None
    assert final.failure_reason.startswith(f"{MAX_ATTEMPTS_REASON} (3 of 3): ")
    assert "the lease of attempt 3 expired: worker w3 neither renewed it" in final.failure_reason
    assert final.failure_code == "E-RUN-004"
    assert await event_types(db, P, run_id) == [
        "RunCreated",
        *["RunClaimed", "RunRequeued"] * 2,
        "RunClaimed",
        "RunFailed",
    ]
    # Each expired attempt is recorded with its worker and the lease's last renewal.
    events = await events_of(db, P, run_id)
    requeues = [e for e in events if isinstance(e, RunRequeued)]
    assert [(e.attempt, e.worker_id) for e in requeues] == [(1, "w1"), (2, "w2")]
    assert all(e.last_renewal_at is not None and "expired" in e.reason for e in requeues)
    [failed] = [e for e in events if isinstance(e, RunFailed)]
    assert (failed.worker_id, failed.attempt, failed.dead_letter) == ("w3", 3, True)


async def test_the_reaper_leaves_live_leases_alone(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    assert await claim(db, run_id, "w1", ttl=30) is not None
    assert await reap_once(db) == (0, 0)
    assert (await load(db, P, run_id)).status == "RUNNING"


async def test_waiting_approval_is_never_reaped(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    assert await claim(db, run_id, "w1", ttl=30) is not None
    await db.in_tenant(
        P,
        lambda c: approvals.request(c, run_id, "w1", 1, name="go", reason="", ttl_s=3600),
    )
    before = await load(db, P, run_id)
    for _ in range(3):
        await asyncio.sleep(SHORT * 2)
        assert await reap_once(db) == (0, 0)
        assert (
            await db.in_platform_writes(lambda c: leases.take_expired_batch(c, "w2", 30, 10)) == []
        )
    after = await load(db, P, run_id)
    assert after == before and after.status == "WAITING_APPROVAL"


async def test_concurrent_reapers_handle_each_run_once(db: Database) -> None:
    run_ids = await create_runs(db, P, 60)
    for run_id in run_ids:
        assert await claim(db, run_id, "w1", ttl=SHORT) is not None
    await asyncio.sleep(SHORT * 2)
    results = await asyncio.gather(*(reap_once(db, batch=7) for _ in range(4)))
    assert sum(r for r, _f in results) == 60
    counts = await count_events(db, "RunRequeued")
    assert sorted(counts.values()) == [1] * 60


async def test_polling_skips_young_and_locked_runs(db: Database) -> None:
    run_ids = await create_runs(db, P, 5)
    assert await db.in_platform_writes(lambda c: leases.poll(c, "w1", 30, 10, 3600)) == []
    locked = asyncio.Event()
    release = asyncio.Event()

    async def hold_first() -> None:
        async with db.tenant(P) as conn:
            await conn.execute(
                "SELECT 1 FROM awooop_run_state WHERE run_id = $1 FOR UPDATE", run_ids[0]
            )
            locked.set()
            await release.wait()

    holder = asyncio.create_task(hold_first())
    await locked.wait()
    try:
        polled = await db.in_platform_writes(lambda c: leases.poll(c, "w1", 30, 10, 0))
    finally:
        release.set()  # a failing poll must not leave the holder (and the test) waiting
        await holder
    assert {s.run_id for s in polled} == set(run_ids[1:])
    assert all(s.status == "RUNNING" and s.worker_id == "w1" for s in polled)
    again = await db.in_platform_writes(lambda c: leases.poll(c, "w2", 30, 10, 0))
    assert [s.run_id for s in again] == [run_ids[0]]


@pytest.mark.connections(14)
async def test_concurrent_pollers_never_share_a_run(db: Database) -> None:
    run_ids = await create_runs(db, P, 200)

    async def poller(n: int) -> list[uuid.UUID]:
        got: list[uuid.UUID] = []
        while True:
            batch = await db.in_platform_writes(lambda c: leases.poll(c, f"w{n}", 30, 7, 0))
            if not batch:
                return got
            got += [s.run_id for s in batch]

    results = await asyncio.gather(*(poller(n) for n in range(10)))
    taken = [r for got in results for r in got]
    assert sorted(taken) == sorted(run_ids)
    assert sorted((await count_events(db, "RunClaimed")).values()) == [1] * 200


async def test_taking_an_expired_run_requeues_and_claims_in_one_transaction(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    # A live lease is not taken; the same lease once over is (ended by the database clock, not
    # by a short TTL and a sleep: on a loaded machine a short lease may end before the check).
    assert await claim(db, run_id, "dead", ttl=30) is not None
    assert await db.in_tenant(P, lambda c: leases.take_expired(c, run_id, "w2", 30)) is None
    await db.in_platform_writes(
        lambda c: c.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second'"
            " WHERE run_id = $1",
            run_id,
        )
    )
    taken = await db.in_tenant(P, lambda c: leases.take_expired(c, run_id, "w2", 30))
    assert taken is not None and taken.claimed
    assert taken.state.worker_id == "w2" and taken.state.attempt_count == 2
    assert await event_types(db, P, run_id) == [
        "RunCreated",
        "RunClaimed",
        "RunRequeued",
        "RunClaimed",
    ]


async def test_release_hands_the_run_back_at_once(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    assert await claim(db, run_id, "w1") is not None
    released = await db.in_tenant(P, lambda c: leases.release(c, run_id, "w1", 1))
    assert released.status == "PENDING" and released.worker_id is None
    again = await claim(db, run_id, "w2")
    assert again is not None and again.attempt_count == 2
    with pytest.raises(LeaseLostError):
        await db.in_tenant(P, lambda c: leases.release(c, run_id, "w1", 1))
