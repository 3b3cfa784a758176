"""Worker sessions (migration 0161, awooop/worker/heartbeat.py): a worker holds its leases
through one row. Its heartbeat writes that row and no run's; a run is leased while both its own
lease and the session are live, so a dead session frees every run it held for the reaper and
refuses their writes, and a run a live worker forgot runs out with its own lease. A worker id
used again gives up what its earlier session held; a stopping worker ends its session; tenants
see no session."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import LeaseLostError
from awooop.core.events import RunRequeued
from awooop.eventlog.state import RunStatus
from awooop.runs import blocked_facts, control, leases
from awooop.worker.assembly import build_worker
from awooop.worker.attempts import StopReason
from awooop.worker.runtime import Worker
from tests.support import handlers
from tests.support.runs import create_runs, load
from tests.support.workers import holding_worker

P = "proj-sessions"


@pytest.fixture
def steady(fast: Settings) -> Settings:
    """A lease long enough that no session runs out while a test sets up on a loaded machine
    (the tests end a session themselves where they mean to)."""
    return msgspec.structs.replace(fast, lease_ttl_s=30.0, heartbeat_interval_s=5.0)


SESSION = "SELECT lease_until, started_at FROM awooop_worker_sessions WHERE worker_id = $1"
CLOCK = "SELECT run_id, lease_until, heartbeat_at, current_step FROM awooop_run_state"


async def holding(
    db: Database, settings: Settings, runs: int, worker_id: str | None = None
) -> tuple[Worker, list[uuid.UUID]]:
    return await holding_worker(db, settings, P, runs, worker_id)


async def clocks(db: Database, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[Any, ...]]:
    async with db.platform() as conn:
        rows = await conn.fetch(CLOCK + " WHERE run_id = ANY($1::uuid[])", run_ids)
    return {r["run_id"]: (r["lease_until"], r["heartbeat_at"], r["current_step"]) for r in rows}


async def session_row(db: Database, worker_id: str) -> Any:
    async with db.platform() as conn:
        return await conn.fetchrow(SESSION, worker_id)


async def end_session_now(db: Database, worker_id: str) -> None:
    """As if the worker died a while ago: its session ran out."""
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_worker_sessions SET lease_until = now() - interval '1 second' "
            "WHERE worker_id = $1",
            worker_id,
        )


async def reap(db: Database) -> list[uuid.UUID]:
    done = await db.in_platform_writes(lambda c: leases.reap(c, 100))
    return sorted(state.run_id for state, _event in done)


async def test_a_heartbeat_writes_the_session_row_and_no_run(
    db: Database, steady: Settings
) -> None:
    w, run_ids = await holding(db, steady, 20)
    before_runs = await clocks(db, run_ids)
    before = await session_row(db, w.worker_id)
    await asyncio.sleep(0.05)
    assert await w.heartbeat.beat() == set(run_ids)
    assert await clocks(db, run_ids) == before_runs  # no run row was written
    after = await session_row(db, w.worker_id)
    assert after["lease_until"] > before["lease_until"]
    assert after["started_at"] == before["started_at"]
    # each run's own lease is the long one; the session's is the lease TTL
    for lease_until, _beat, _step in before_runs.values():
        assert lease_until - before["lease_until"] > timedelta(seconds=steady.run_lease_s / 2)
    # every local deadline moved with the session
    assert all(a.stop_reason is None for a in w.executor.attempts.values())


async def test_a_dead_session_frees_its_runs_for_the_reaper_and_refuses_their_writes(
    db: Database, steady: Settings
) -> None:
    w, run_ids = await holding(db, steady, 3)
    assert await reap(db) == []  # live: nothing to reap
    await end_session_now(db, w.worker_id)
    write = [leases.Completion(run_ids[0], w.worker_id, 1, {"late": True})]
    [answer] = await w.heartbeat.statements.complete_many(write)
    assert isinstance(answer, LeaseLostError)
    assert await reap(db) == run_ids  # their own leases have minutes left
    for run_id in run_ids:
        state = await load(db, P, run_id)
        assert state.status is RunStatus.PENDING
        assert state.worker_id is None


async def test_a_run_the_live_worker_forgot_runs_out_with_its_own_lease(
    db: Database, steady: Settings
) -> None:
    w, run_ids = await holding(db, steady, 2)
    forgotten = run_ids[0]
    async with db.platform_writes() as conn:  # as if its own lease was last renewed long ago
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
            "WHERE run_id = $1",
            forgotten,
        )
    await w.heartbeat.beat()  # the session is renewed: the forgotten run's lease stays out
    assert await reap(db) == [forgotten]
    assert (await load(db, P, run_ids[1])).status is RunStatus.RUNNING


async def test_a_worker_id_used_again_gives_up_what_its_earlier_session_held(
    db: Database, steady: Settings
) -> None:
    earlier, run_ids = await holding(db, steady, 3, worker_id="worker-again")
    first = await session_row(db, "worker-again")
    later = build_worker(
        db=db, settings=steady, handler=handlers.journaled, worker_id="worker-again"
    ).worker
    await later.heartbeat.open(asyncio.Event())
    assert (await session_row(db, "worker-again"))["started_at"] > first["started_at"]
    for run_id in run_ids:  # requeued at once, not kept alive by the new session
        state = await load(db, P, run_id)
        assert state.status is RunStatus.PENDING
        assert state.attempt_count == 1
    # the earlier process's renewal is refused: the session is no longer its own, and it does
    # not take the id back from the live session of the later one
    taken = await session_row(db, "worker-again")
    with pytest.raises(LeaseLostError, match="held by a live session of another process"):
        await earlier.heartbeat.beat()
    assert all(a.stop_reason is StopReason.LOST for a in earlier.executor.attempts.values())
    assert await session_row(db, "worker-again") == taken


async def test_a_session_that_ran_out_loses_its_attempts_and_a_new_one_begins(
    db: Database, steady: Settings
) -> None:
    w, run_ids = await holding(db, steady, 2)
    first = await session_row(db, w.worker_id)
    await end_session_now(db, w.worker_id)
    assert await w.heartbeat.beat() == set()
    assert all(a.stop_reason is StopReason.LOST for a in w.executor.attempts.values())
    again = await session_row(db, w.worker_id)
    assert again["started_at"] > first["started_at"]
    assert again["lease_until"] > datetime.now(UTC)
    for run_id in run_ids:  # the new session does not revive them: given up
        assert (await load(db, P, run_id)).status is RunStatus.PENDING


async def test_a_step_is_written_once_it_has_run_for_an_interval_and_not_again(
    db: Database, steady: Settings
) -> None:
    w, [run_id] = await holding(db, steady, 1)
    attempt = w.executor.attempts[run_id]
    attempt.enter_step("think")
    await w.heartbeat.beat()
    assert (await clocks(db, [run_id]))[run_id][2] is None  # younger than an interval
    assert attempt.step_started_at is not None
    attempt.step_started_at -= timedelta(seconds=steady.heartbeat_interval_s)
    await w.heartbeat.beat()
    written = (await clocks(db, [run_id]))[run_id]
    assert written[2] == "think"
    await w.heartbeat.beat()
    assert (await clocks(db, [run_id]))[run_id] == written  # unchanged: no write
    attempt.leave_step((None, None))
    await w.heartbeat.beat()
    assert (await clocks(db, [run_id]))[run_id][2] is None  # the step ended: written once


async def test_a_runs_own_lease_is_renewed_when_half_of_it_is_gone(
    db: Database, steady: Settings
) -> None:
    w, [run_id] = await holding(db, steady, 1)
    before = (await clocks(db, [run_id]))[run_id][0]
    await w.heartbeat.beat()
    assert (await clocks(db, [run_id]))[run_id][0] == before
    w.executor.attempts[run_id].run_confirmed -= steady.run_lease_s / 2
    await w.heartbeat.beat()
    assert (await clocks(db, [run_id]))[run_id][0] > before


async def test_a_stopping_worker_ends_its_session(db: Database, steady: Settings) -> None:
    w = build_worker(db=db, settings=steady, handler=handlers.journaled).worker
    stop = asyncio.Event()
    await w.heartbeat.open(stop)
    assert (await session_row(db, w.worker_id))["lease_until"] > datetime.now(UTC)
    running = asyncio.ensure_future(w.heartbeat.run(stop))
    stop.set()
    await running
    row = await session_row(db, w.worker_id)
    assert row["lease_until"] <= datetime.now(UTC)


async def test_a_tenant_sees_only_the_sessions_holding_its_runs_and_writes_none(
    db: Database, steady: Settings
) -> None:
    w, _run_ids = await holding(db, steady, 1)
    other = build_worker(db=db, settings=steady, handler=handlers.journaled).worker
    await other.heartbeat.open(asyncio.Event())
    [elsewhere] = await create_runs(db, "proj-sessions-other", 1)
    state = await db.in_tenant(
        "proj-sessions-other",
        lambda c: leases.claim(c, elsewhere, other.worker_id, steady.claim_ttl_s),
    )
    assert state is not None
    async with db.tenant(P) as conn:
        seen = await conn.fetch("SELECT worker_id FROM awooop_worker_sessions")
        assert [r["worker_id"] for r in seen] == [w.worker_id]
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with conn.transaction():
                await conn.execute(
                    "UPDATE awooop_worker_sessions SET lease_until = now() WHERE worker_id = $1",
                    w.worker_id,
                )


async def test_a_peek_and_a_fence_check_see_the_lease_end_with_the_session(
    db: Database, steady: Settings
) -> None:
    """A tenant's read of a run (the stream path's reconcile) and a cancel notice's check judge
    the lease by the session too: a dead worker's run is seen expired, not held for minutes."""
    w, [run_id] = await holding(db, steady, 1)
    state, now = await db.in_tenant(P, lambda c: leases.peek(c, run_id))
    assert leases.availability(state, now, "someone-else") is leases.Availability.HELD
    await end_session_now(db, w.worker_id)
    state, now = await db.in_tenant(P, lambda c: leases.peek(c, run_id))
    assert leases.availability(state, now, "someone-else") is leases.Availability.EXPIRED
    found, now = await w.heartbeat.statements.fences([run_id])
    assert found[run_id].lease_until is not None and found[run_id].lease_until < now
    assert (await load(db, P, run_id)).lease_until > now  # the row keeps its own lease


async def test_a_claims_answer_sees_the_lease_end_with_the_session(
    db: Database, steady: Settings
) -> None:
    """A message that names a run held by a dead worker (a redelivery): the claim's answer
    judges its lease by the session too, so the claimer takes it at once (EXPIRED)."""
    w, [run_id] = await holding(db, steady, 1)
    statements = w.heartbeat.statements
    batch = await statements.claim_many([run_id], "worker-other", steady.claim_ttl_s)
    assert leases.availability(batch.others[run_id], batch.now, "worker-other") is (
        leases.Availability.HELD
    )
    await end_session_now(db, w.worker_id)
    batch = await statements.claim_many([run_id], "worker-other", steady.claim_ttl_s)
    assert leases.availability(batch.others[run_id], batch.now, "worker-other") is (
        leases.Availability.EXPIRED
    )


async def test_blocked_on_and_the_reap_report_the_sessions_renewal_as_the_heartbeat(
    db: Database, steady: Settings
) -> None:
    """The run's row keeps its claim's heartbeat; an operator's blocked_on and the reap event
    report the worker's last renewal, the session's."""
    w, [run_id] = await holding(db, steady, 1)
    await asyncio.sleep(0.05)
    await w.heartbeat.beat()
    async with db.platform() as conn:
        session = await conn.fetchrow(
            "SELECT lease_until, renewed_at FROM awooop_worker_sessions WHERE worker_id = $1",
            w.worker_id,
        )
    assert (await load(db, P, run_id)).heartbeat_at < session["renewed_at"]
    async with db.tenant(P) as conn:
        facts = (await blocked_facts.run_facts(conn, [run_id]))[run_id]
    assert facts.heartbeat_at == session["renewed_at"]
    assert facts.lease_until == session["lease_until"]
    await end_session_now(db, w.worker_id)
    [(_state, event)] = await db.in_platform_writes(lambda c: leases.reap(c, 10))
    assert isinstance(event, RunRequeued)
    assert event.last_renewal_at == session["renewed_at"]


async def test_a_cancel_missed_while_the_listener_was_away_is_found_when_it_reconnects(
    db: Database, steady: Settings
) -> None:
    """Under a session the heartbeat reads no run's row, so a cancel whose notice was lost (no
    listener connected) would wait for the run's own renewal: the listener's reconnection
    checks every attempt held here."""
    w, [run_id] = await holding(db, steady, 1)
    await db.in_tenant(P, lambda c: control.cancel(c, run_id, actor="ops"))  # nobody listens
    await w.heartbeat.beat()
    attempt = w.executor.attempts[run_id]
    assert attempt.stop_reason is None  # the session's renewal did not see it
    w.cancel_listener.reconnected()
    await w.cancel_listener.check()
    assert attempt.stop_reason is StopReason.CANCELLED
