"""The stats loops sample real Postgres and Redis into their gauges (R-51)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
from prometheus_client import REGISTRY

from awooop.core import events as ev
from awooop.core.loops import LoopContext
from awooop.eventlog.runs import create_run
from awooop.eventlog.state import TERMINAL, RunStatus
from awooop.loops.stats import LIVE_STATES, StatsLoops, runs_sample
from awooop.runs import leases, run_rows, signals
from awooop.services import Services
from awooop.streams.keys import WORKER_GROUP
from tests.support import factories

CTX = LoopContext(project_id="__platform__")


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_live_states_are_every_non_terminal_state() -> None:
    assert set(LIVE_STATES) == {str(s) for s in RunStatus} - {str(s) for s in TERMINAL}


def test_runs_sample_fills_every_live_state_of_a_seen_project() -> None:
    by_state, oldest, overdue = runs_sample(
        [
            ("p", "RUNNING", 2, 30.0, 1, 0, 0),
            ("p", "WAITING_APPROVAL", 1, 5.0, 0, 1, 0),
            ("p", "WAITING_EVENT", 4, 9.0, 0, 0, 3),
        ]
    )
    assert by_state[("p", "RUNNING")] == 2 and by_state[("p", "PENDING")] == 0
    assert len(by_state) == len(LIVE_STATES)
    assert oldest == {
        ("p", "RUNNING"): 30.0,
        ("p", "WAITING_APPROVAL"): 5.0,
        ("p", "WAITING_EVENT"): 9.0,
    }
    assert overdue == {
        ("p", "lease_expired"): 1.0,
        ("p", "approval_expired"): 1.0,
        ("p", "timer_due"): 3.0,
    }


async def make_run(services: Services, project: str, *, to: str) -> uuid.UUID:
    run_id = uuid.uuid4()
    async with services.db.tenant(project) as conn:
        now = await conn.fetchval("SELECT now()")
        await create_run(conn, factories.created(run_id, project_id=project, at=now))
        if to == "PENDING":
            return run_id
        await run_rows.record(
            conn,
            run_id,
            lambda s, now: ev.RunClaimed(
                at=now, worker_id="w", attempt=1, lease_until=now - timedelta(hours=1)
            ),
        )
        if to == "WAITING_APPROVAL":
            await run_rows.record(
                conn,
                run_id,
                lambda s, now: ev.ApprovalRequested(
                    at=now, worker_id="w", attempt=1, expires_at=now - timedelta(hours=1)
                ),
            )
        elif to == "COMPLETED":
            await run_rows.record(
                conn,
                run_id,
                lambda s, now: ev.RunCompleted(at=now, worker_id="w", attempt=1, result=None),
            )
    return run_id


async def test_runs_by_state_oldest_and_overdue(services: Services) -> None:
    project = f"stats-{uuid.uuid4().hex[:6]}"
    for to in ("PENDING", "PENDING", "RUNNING", "WAITING_APPROVAL", "COMPLETED"):
        await make_run(services, project, to=to)
    stats = StatsLoops(services)
    await stats.sample_runs(CTX)

    def runs(state: str) -> float | None:
        return sample("awooop_runs", project_id=project, state=state)

    assert (runs("PENDING"), runs("RUNNING"), runs("WAITING_APPROVAL")) == (2, 1, 1)
    assert runs("RESUMED") == 0 and runs("COMPLETED") is None  # finished runs are not sampled
    age = sample("awooop_runs_oldest_age_seconds", project_id=project, state="PENDING")
    assert age is not None and 0 <= age < 60
    overdue = "awooop_runs_overdue"
    assert sample(overdue, project_id=project, reason="lease_expired") == 1
    assert sample(overdue, project_id=project, reason="approval_expired") == 1

    # the project's live runs finish: its series go away instead of keeping old values
    async with services.db.platform_writes() as conn:
        await conn.execute("DELETE FROM awooop_run_state WHERE project_id = $1", project)
    await stats.sample_runs(CTX)
    assert runs("PENDING") is None
    assert sample(overdue, project_id=project, reason="lease_expired") is None


async def test_waits_past_their_due_time_are_overdue_timers(services: Services) -> None:
    """A wait due an hour ago (no timers loop ran) is overdue (timer_due) and sets
    awooop_timers_overdue_seconds; one due in a minute, or just now, is not."""
    project = f"stats-{uuid.uuid4().hex[:6]}"
    runs = [await make_run(services, project, to="PENDING") for _ in range(3)]
    for run_id, due in zip(runs, ("-1 hour", "-5 seconds", "1 minute"), strict=True):
        async with services.db.tenant(project) as conn:
            await leases.claim(conn, run_id, "w", 30)
            await signals.take_or_wait(
                conn, run_id, "w", 1, step="event:go:1", name="go", match=None,
                time_out=timedelta(hours=1), due_at=None,
            )  # fmt: skip
        async with services.db.platform_writes() as conn:
            await conn.execute(
                "UPDATE awooop_run_waits SET due_at = now() + $2::text::interval WHERE run_id = $1",
                run_id,
                due,
            )
    stats = StatsLoops(services)
    await stats.sample_runs(CTX)
    overdue = "awooop_runs_overdue"
    assert sample(overdue, project_id=project, reason="timer_due") == 1
    assert sample(overdue, project_id=project, reason="lease_expired") == 0
    assert sample("awooop_runs", project_id=project, state="WAITING_EVENT") == 3
    late = sample("awooop_timers_overdue_seconds")
    assert late is not None and 3600 <= late < 3700, late
    async with services.db.platform_writes() as conn:  # the timers loop caught up
        await conn.execute("DELETE FROM awooop_run_waits WHERE due_at < now()")
    await stats.sample_runs(CTX)
    assert sample("awooop_timers_overdue_seconds") == 0


async def test_contract_outbox_lag(services: Services) -> None:
    stats = StatsLoops(services)
    await stats.sample_outbox(CTX)
    assert sample("awooop_outbox_backlog_seconds", outbox="contract") == 0
    async with services.db.platform_writes() as conn:
        revision = await conn.fetchval(
            "INSERT INTO awooop_contract_revisions "
            "(project_id, contract_family, contract_id, body, body_hash) "
            "VALUES ('p', 'agent', 'c', '{}', 'h') RETURNING revision_id"
        )
        for age_s, delivered in ((120, False), (600, True), (30, False)):
            await conn.execute(
                "INSERT INTO awooop_contract_outbox (event_type, project_id, contract_family, "
                "contract_id, new_revision_id, created_at, delivered_at) VALUES "
                "('RevisionActivated', 'p', 'agent', 'c', $1, now() - make_interval(secs => $2),"
                " CASE WHEN $3 THEN now() END)",
                revision,
                float(age_s),
                delivered,
            )
    await stats.sample_outbox(CTX)
    lag = sample("awooop_outbox_backlog_seconds", outbox="contract")
    assert lag is not None and 120 <= lag < 180  # the oldest UNdelivered row


async def test_events_outbox_backlog_is_read_from_the_relay_cursor(
    services: Services, database_url: str
) -> None:
    """No relay runs here: what the stats loop reports is read from Postgres alone, so it keeps
    rising while a relay is stopped or hung (the relay's own gauge cannot)."""
    stats = StatsLoops(services)
    await stats.sample_outbox(CTX)
    assert sample("awooop_outbox_backlog_seconds", outbox="events") == 0  # nothing recorded
    project = f"stats-{uuid.uuid4().hex[:6]}"
    await make_run(services, project, to="PENDING")
    await make_run(services, project, to="PENDING")
    # The events were recorded "2 minutes ago" (the owner may rewrite history; roles may not).
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute(
            "UPDATE awooop_events SET recorded_at = recorded_at - interval '120 seconds'"
        )
        last = await admin.fetchrow(
            "SELECT tx_id::text::bigint AS tx_id, position FROM awooop_events "
            "ORDER BY tx_id DESC, position DESC LIMIT 1"
        )
    finally:
        await admin.close()
    await stats.sample_outbox(CTX)
    lag = sample("awooop_outbox_backlog_seconds", outbox="events")
    assert lag is not None and 120 <= lag < 180
    # the relay's cursor stops just before the last event: that one still waits
    async with services.db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_relay_cursor SET tx_id = $1, position = $2 WHERE name = 'events'",
            last["tx_id"],
            last["position"] - 1,
        )
    await stats.sample_outbox(CTX)
    lag = sample("awooop_outbox_backlog_seconds", outbox="events")
    assert lag is not None and 120 <= lag < 180
    # ... and past everything: nothing is waiting
    async with services.db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_relay_cursor SET tx_id = $1, position = $2 WHERE name = 'events'",
            last["tx_id"],
            last["position"],
        )
    await stats.sample_outbox(CTX)
    assert sample("awooop_outbox_backlog_seconds", outbox="events") == 0


async def test_consumer_group_lag_and_pending(services: Services) -> None:
    redis, keys = services.redis, services.keys
    work = keys.work_stream(0)
    for i in range(3):
        await redis.xadd(work, {"e": str(i)})
    await redis.xgroup_create(work, WORKER_GROUP, id="0")
    await redis.xreadgroup(WORKER_GROUP, "c1", {work: ">"}, count=1)
    stats = StatsLoops(services)
    await stats.sample_streams(CTX)
    assert sample("awooop_consumer_group_pending", stream=work, group=WORKER_GROUP) == 1
    assert sample("awooop_consumer_group_lag", stream=work, group=WORKER_GROUP) == 2

    await redis.delete(work)  # Redis lost the stream: the group's series must not linger
    await stats.sample_streams(CTX)
    assert sample("awooop_consumer_group_pending", stream=work, group=WORKER_GROUP) is None
    assert sample("awooop_consumer_group_lag", stream=work, group=WORKER_GROUP) is None
