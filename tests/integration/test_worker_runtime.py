"""The worker runtime in-process on real Postgres: execution, journal, fencing, cancel,
lease loss, shutdown, approvals, tool waits (R-11 to R-15)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import LeaseReleased, RunRequeued, run_stream_id
from awooop.loops.runs import reap_once
from awooop.runs import approvals, control, leases
from awooop.runs.approvals import Decision
from awooop.worker.assembly import build_worker
from awooop.worker.executor import Handler
from awooop.worker.outcomes import Outcome
from awooop.worker.runtime import Worker
from tests.support import handlers
from tests.support.handlers import effects_of
from tests.support.logins import bound_login
from tests.support.runs import (
    count_events,
    create_runs,
    event_types,
    events_of,
    journaled_by_a_dead_worker,
    load,
)
from tests.support.waiting import eventually

P = "proj-w"


@pytest.fixture(autouse=True)
def clean_effects() -> Iterator[None]:
    handlers.EFFECTS.clear()
    handlers.TICKETS.clear()
    yield
    handlers.EFFECTS.clear()
    handlers.TICKETS.clear()


def worker(
    db: Database, settings: Settings, handler: Handler = handlers.journaled, **kw: Any
) -> Worker:
    return build_worker(
        db=db, settings=settings, handler=handler, concurrency=kw.pop("concurrency", 8), **kw
    ).worker


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.connections(21)
async def test_burst_mode_runs_every_run_once(db: Database, fast: Settings) -> None:
    run_ids = await create_runs(db, P, 40, payload={})
    w = worker(db, fast)
    assert await w.run_until_idle() == 40
    completed = await count_events(db, "RunCompleted")
    assert sorted(completed[run_stream_id(r)] for r in run_ids) == [1] * 40
    state = await load(db, P, run_ids[0])
    assert state.status == "COMPLETED" and state.result == {"one": 41, "two": 42}
    assert state.saga_steps["one"] == {"attempt": 1, "result": 41}
    assert state.worker_id is None and state.lease_until is None
    assert w.executor.finished[Outcome.COMPLETED] == 40


async def test_a_retried_attempt_replays_journaled_steps(db: Database, fast: Settings) -> None:
    run_id = await journaled_by_a_dead_worker(db, P, "one", 41)
    assert await worker(db, fast).run_until_idle() == 1
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED" and state.attempt_count == 2
    assert state.result == {"one": 41, "two": 42}
    assert effects_of(run_id, "one") == []  # the side effect of step one did not run again
    assert len(effects_of(run_id, "two")) == 1
    assert state.saga_steps["one"]["attempt"] == 1 and state.saga_steps["two"]["attempt"] == 2


async def test_a_handler_exception_fails_the_run_with_a_reason(
    db: Database, fast: Settings
) -> None:
    [run_id] = await create_runs(db, P, payload={"fail": True})
    await worker(db, fast).run_until_idle()
    state = await load(db, P, run_id)
    assert state.status == "FAILED"
    assert (state.failure_code, state.failure_reason) == (
        "E-HANDLER-001",
        "ValueError: asked to fail",
    )
    assert "two" in state.saga_steps  # steps before the failure stay journaled


async def test_postgres_unavailable_under_a_handler_abandons_the_attempt_not_the_run(
    db: Database, fast: Settings
) -> None:
    """A journal write or pointer check that finds Postgres gone (a restart) must not fail the
    run: whether its RunFailed got written would depend on when Postgres came back. The
    attempt is handed back uncharged (LeaseReleased once Postgres takes it), and the next
    attempt completes without repeating journaled steps, with the run's budget whole."""
    [run_id] = await create_runs(db, P, payload={"unavailable_on_attempts": [1]})
    w = worker(db, fast)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        await eventually(
            lambda: _status_is(db, run_id, "COMPLETED"),
            what="the run COMPLETED in attempt 2",
        )
    finally:
        stop.set()
        await task
    state = await load(db, P, run_id)
    assert state.attempt_count == 2 and state.failure_code is None
    assert state.max_attempts == 4  # 3, and the abandoned attempt was not charged
    [released] = [e for e in await events_of(db, P, run_id) if isinstance(e, LeaseReleased)]
    assert not released.charged and "connection lost" in released.reason
    assert "RunFailed" not in await event_types(db, P, run_id)
    assert len(effects_of(run_id, "unavailable")) == 1
    assert len(effects_of(run_id, "one")) == 1  # journaled in attempt 1, not run again
    assert w.executor.finished[Outcome.RELEASED] == 1


async def test_a_step_name_used_twice_fails_the_run(db: Database, fast: Settings) -> None:
    [run_id] = await create_runs(db, P, payload={"same_step_twice": True})
    await worker(db, fast).run_until_idle()
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-HANDLER-003")
    assert state.failure_reason is not None
    assert "step 'one' was used twice" in state.failure_reason, state.failure_reason


async def test_a_lost_lease_cancels_the_handler_and_its_writes_are_fenced(
    db: Database, fast: Settings
) -> None:
    [run_id] = await create_runs(db, P, payload={"hang_on_attempts": [1]})
    # One slot: the poll cannot start attempt 2 (which would cancel attempt 1 itself) before
    # the heartbeat has found the lease lost, however late a loaded machine runs it.
    w = worker(db, fast, concurrency=1)
    stop = asyncio.Event()
    losses = metric("awooop_lease_losses_total")
    serving = asyncio.create_task(w.run(stop))
    await eventually(lambda: _has_effect(run_id, "hang"), what="the handler hanging")

    # Simulated stall: the lease runs out without the worker knowing, and the reaper
    # requeues the run; then the worker's next heartbeat finds its lease gone. One
    # transaction: the worker's own poll, which takes expired runs, cannot come in between.
    async def stall_and_reap(conn: Any) -> list[Any]:
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
            "WHERE run_id = $1",
            run_id,
        )
        return await leases.reap(conn, 10)

    [(_, requeued)] = await db.in_platform_writes(stall_and_reap)
    assert isinstance(requeued, RunRequeued)
    await eventually(
        lambda: _has_effect(run_id, "cancelled"),
        what="the handler cancelled after its lease was lost",
    )
    assert metric("awooop_lease_losses_total") >= losses + 1
    # The worker's poll takes the requeued run again as attempt 2, which completes.
    await eventually(
        lambda: _status_is(db, run_id, "COMPLETED"), what="the run COMPLETED in attempt 2"
    )
    stop.set()
    await serving
    assert w.executor.finished[Outcome.LOST] == 1
    types = await event_types(db, P, run_id)
    assert types.count("RunCompleted") == 1 and "RunRequeued" in types
    assert len(effects_of(run_id, "one")) == 1  # attempt 2 replayed step one


async def test_a_local_lease_deadline_stops_the_handler_without_the_database(
    db: Database, fast: Settings
) -> None:
    """No heartbeat runs: the local deadline's timer alone cancels the handler, before the
    lease runs out in Postgres (R-18)."""
    timed = msgspec.structs.replace(fast, lease_ttl_s=4.0, heartbeat_interval_s=1.0)
    [run_id] = await create_runs(db, P, payload={"hang_on_attempts": [1]})
    w = worker(db, timed)
    await w.poll_once(0)  # polling only: nothing renews the lease
    await eventually(
        lambda: _has_effect(run_id, "cancelled"),
        what="the handler cancelled by its local lease deadline",
    )
    cancelled_at = next(e["t"] for e in effects_of(run_id, "cancelled"))
    lease_until = (await load(db, P, run_id)).lease_until
    assert lease_until is not None and cancelled_at < lease_until.timestamp()
    await w.drain(1.0)
    assert w.executor.finished[Outcome.LOST] == 1
    assert (await load(db, P, run_id)).status == "RUNNING"  # nothing written; the reaper's job


async def test_cancel_stops_a_running_handler_at_once(db: Database, fast: Settings) -> None:
    slow = msgspec.structs.replace(fast, lease_ttl_s=3.0, heartbeat_interval_s=2.0)  # not it
    [run_id] = await create_runs(db, P, payload={"hang_on_attempts": [1]})
    w = worker(db, slow)
    stop = asyncio.Event()
    serving = asyncio.create_task(w.run(stop))
    await eventually(lambda: _has_effect(run_id, "hang"), what="the handler hanging")
    await asyncio.wait_for(w.cancel_listener.connected.wait(), 5)
    started = asyncio.get_running_loop().time()
    state = await db.in_tenant(P, lambda c: control.cancel(c, run_id, actor="ops", reason="stop"))
    assert state.status == "CANCELLED"
    await eventually(
        lambda: _has_effect(run_id, "cancelled"),
        interval_s=0.02,
        what="the handler cancelled by the cancel notice",
    )
    assert asyncio.get_running_loop().time() - started < 0.8
    stop.set()
    await serving
    assert w.executor.finished[Outcome.CANCELLED] == 1
    final = await load(db, P, run_id)
    assert (final.status, final.failure_reason) == ("CANCELLED", "stop")
    assert (await event_types(db, P, run_id))[-1] == "RunCancelled"


async def test_a_cancel_notice_is_a_doorbell_not_an_order(
    db: Database, fast: Settings, database_url: str
) -> None:
    """Any login can NOTIFY the cancel channel: a producer login bound to the run's own project
    floods it with the run's id (and with junk); the worker reads the row, finds its attempt
    still holds the run, and lets the handler go on. A real cancel then stops it."""
    slow = msgspec.structs.replace(fast, lease_ttl_s=3.0, heartbeat_interval_s=1.0)
    [run_id] = await create_runs(db, P, payload={"hang_on_attempts": [1]})
    w = worker(db, slow)
    stop = asyncio.Event()
    serving = asyncio.create_task(w.run(stop))
    await eventually(lambda: _has_effect(run_id, "hang"), what="the handler hanging")
    await asyncio.wait_for(w.cancel_listener.connected.wait(), 5)
    ignored = metric("awooop_cancel_notices_total", verdict="ignore")
    async with bound_login(database_url, [P]) as login:
        conn = await login.connect()
        try:
            for payload in (str(run_id), "not-a-run", str(uuid.uuid4())) * 20:
                await conn.execute("SELECT pg_notify('awooop_run_cancelled', $1)", payload)
        finally:
            await conn.close()
    await eventually(
        lambda: (
            metric("awooop_cancel_notices_total", verdict="ignore") > ignored
            or bool(effects_of(run_id, "cancelled"))
        ),
        what="the worker checked the notice against Postgres (or obeyed it)",
    )
    await asyncio.sleep(2 * slow.heartbeat_interval_s)  # two renewals: still the same attempt
    assert effects_of(run_id, "cancelled") == []
    state = await load(db, P, run_id)
    assert (state.status, state.attempt_count, state.worker_id) == ("RUNNING", 1, w.worker_id)
    state = await db.in_tenant(P, lambda c: control.cancel(c, run_id, actor="ops", reason="stop"))
    await eventually(
        lambda: _has_effect(run_id, "cancelled"), what="the handler cancelled by a real cancel"
    )
    stop.set()
    await serving
    assert w.executor.finished[Outcome.CANCELLED] == 1
    assert w.executor.finished[Outcome.LOST] == 0
    assert (await event_types(db, P, run_id)).count("RunClaimed") == 1


async def test_cancel_works_from_every_non_terminal_state(db: Database) -> None:
    pending, running, approval = await create_runs(db, P, 3)
    await db.in_tenant(P, lambda c: leases.claim(c, running, "w1", 30))
    await db.in_tenant(P, lambda c: leases.claim(c, approval, "w1", 30))
    await db.in_tenant(
        P, lambda c: approvals.request(c, approval, "w1", 1, name="go", reason="", ttl_s=60)
    )
    for run_id in (pending, running, approval):
        state = await db.in_tenant(P, lambda c, r=run_id: control.cancel(c, r, actor="ops"))
        assert state.status == "CANCELLED" and state.failure_reason == "Cancelled by ops"
    from awooop.core.errors import IllegalTransitionError

    with pytest.raises(IllegalTransitionError):
        await db.in_tenant(P, lambda c: control.cancel(c, pending, actor="ops"))


@pytest.mark.connections(17)
async def test_shutdown_releases_unfinished_runs_for_another_worker(
    db: Database, fast: Settings
) -> None:
    quick = await create_runs(db, P, 3, payload={})
    slow = await create_runs(db, P, 3, payload={"sleep": 30})
    w1 = worker(db, fast, concurrency=8)
    stop = asyncio.Event()
    serving = asyncio.create_task(w1.run(stop))
    await eventually(lambda: _count_status(db, "COMPLETED", 3), what="the 3 quick runs COMPLETED")
    await eventually(lambda: _all_running(db, slow), what="the 3 slow runs RUNNING")
    stop.set()
    await asyncio.wait_for(serving, 10)
    assert w1.executor.finished[Outcome.RELEASED] == 3
    for run_id in slow:
        state = await load(db, P, run_id)
        assert state.status == "PENDING" and state.worker_id is None
        assert (await event_types(db, P, run_id))[-1] == "LeaseReleased"
        assert len(effects_of(run_id, "cancelled")) == 1
    # Another worker takes them at once (attempt 2, step one replayed).
    w2 = worker(db, msgspec.structs.replace(fast, shutdown_grace_s=5), concurrency=8)
    for run_id in slow:
        async with db.platform_writes() as conn:
            await conn.execute(
                "UPDATE awooop_run_state SET input = '{}'::jsonb WHERE run_id = $1", run_id
            )
    assert await w2.run_until_idle() == 3
    completed = await count_events(db, "RunCompleted")
    assert [completed[run_stream_id(r)] for r in [*quick, *slow]] == [1] * 6
    assert all(len(effects_of(r, "one")) == 1 for r in slow)


async def test_approval_suspends_resumes_and_completes(db: Database, fast: Settings) -> None:
    [run_id] = await create_runs(db, P, payload={"approval": True})
    assert await worker(db, fast).run_until_idle() == 1
    waiting = await load(db, P, run_id)
    assert waiting.status == "WAITING_APPROVAL" and waiting.worker_id is None
    assert waiting.lease_until is None and waiting.approval_expires_at is not None
    [ticket] = handlers.TICKETS
    assert ticket.run_id == run_id and ticket.name == "go"
    # Reaper passes leave it alone.
    assert await reap_once(db) == (0, 0)
    resumed = await db.in_tenant(
        P, lambda c: approvals.decide(c, run_id, ticket.token, Decision.APPROVED, actor="alice")
    )
    assert resumed.status == "RESUMED"
    assert await worker(db, fast).run_until_idle() == 1
    done = await load(db, P, run_id)
    assert done.status == "COMPLETED" and done.result == {"one": 41, "two": 42}
    assert done.saga_steps["approval:go"]["result"]["actor"] == "alice"
    assert len(effects_of(run_id, "one")) == 1
    assert await event_types(db, P, run_id) == [
        "RunCreated",
        "RunClaimed",
        "StepCompleted",
        "ApprovalRequested",
        "ApprovalGranted",
        "RunClaimed",
        "StepCompleted",
        "StepCompleted",
        "RunCompleted",
    ]


async def test_a_tool_wait_keeps_the_lease_and_is_journaled(db: Database, fast: Settings) -> None:
    [run_id] = await create_runs(db, P, payload={"tool": True, "tool_s": 1.5})
    w = worker(db, fast)
    task = asyncio.create_task(w.run_until_idle())
    await eventually(lambda: _status_is(db, run_id, "WAITING_TOOL"), what="the run WAITING_TOOL")
    first = await load(db, P, run_id)
    await asyncio.sleep(1.2)  # longer than the 1 s lease: heartbeats must renew it
    later = await load(db, P, run_id)
    assert later.status == "WAITING_TOOL" and later.lease_until > first.lease_until  # type: ignore[operator]  # both set while leased
    await task
    done = await load(db, P, run_id)
    assert done.status == "COMPLETED"
    assert done.saga_steps["tool:search"]["result"] == {"found": 3}
    types = await event_types(db, P, run_id)
    assert types[3:6] == ["ToolWaitStarted", "ToolResultReceived", "StepCompleted"]


async def test_take_reconciles_a_message_with_the_database(db: Database, fast: Settings) -> None:
    done, held, expired = await create_runs(db, P, 3, payload={})
    w = worker(db, fast)
    assert await w.take(done, P, path="stream") is True
    assert (await load(db, P, done)).status == "COMPLETED"
    assert await w.take(done, P, path="stream") is True  # finished: acknowledge
    assert await w.take(uuid.uuid4(), P, path="stream") is True  # unknown: acknowledge
    await db.in_tenant(P, lambda c: leases.claim(c, held, "other", 30))
    assert await w.take(held, P, path="stream") is False  # live lease elsewhere: leave it
    await db.in_tenant(P, lambda c: leases.claim(c, expired, "dead", 0.05))
    await asyncio.sleep(0.1)  # its 0.05 s lease runs out
    assert await w.take(expired, P, path="reclaim") is True  # expired: requeue, take, run
    state = await load(db, P, expired)
    assert (state.status, state.attempt_count) == ("COMPLETED", 2)
    history = [type(e).__name__ for e in await events_of(db, P, expired)]
    assert history[:4] == ["RunCreated", "RunClaimed", "RunRequeued", "RunClaimed"]


async def _has_effect(run_id: uuid.UUID, what: str) -> bool:
    return bool(effects_of(run_id, what))


async def _status_is(db: Database, run_id: uuid.UUID, status: str) -> bool:
    return (await load(db, P, run_id)).status == status


async def _count_status(db: Database, status: str, n: int) -> bool:
    async with db.platform() as conn:
        count = await conn.fetchval(
            "SELECT count(*) FROM awooop_run_state WHERE status = $1", status
        )
    return bool(count == n)


async def _all_running(db: Database, run_ids: list[uuid.UUID]) -> bool:
    states = [await load(db, P, r) for r in run_ids]
    return all(s.status == "RUNNING" for s in states)


async def test_polling_backs_off_while_the_stream_intake_is_busy(
    db: Database, fast: Settings
) -> None:
    assert worker(db, fast).poll_min_age() == 0.0  # polling only: any age
    streaming = worker(db, fast, streams=True)
    handled = [0]
    streaming.intake_activity = lambda: handled[0]
    assert streaming.poll_min_age() == fast.poll_interval_s  # idle intake
    handled[0] += 5
    assert streaming.poll_min_age() == 10 * fast.poll_interval_s  # deliveries arriving
    assert streaming.poll_min_age() == fast.poll_interval_s  # quiet again
