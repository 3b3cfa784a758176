"""Retention of the signals of finished runs (awooop.runs.signal_retention, migrations 0144
and 0151) on real Postgres: a run's end marks its signals, delivered or not, in the transaction
that finishes it (the event write path and the one-statement completion), a retry unmarks
them, a producer's signal committed after the end is marked by the timers loop; the
dedupe_expiry loop deletes the marked ones past the retention, in batches through their
partial index, and keeps live runs' signals and recent ends; a delivered signal's payload
stays in its run's SignalDelivered event."""

from __future__ import annotations

import uuid
from typing import Any

from awooop.core.db import Database
from awooop.core.events import RunFailed, run_stream_id
from awooop.eventlog import batches
from awooop.runs import control, leases, run_rows, signal_retention, signals
from awooop.services import Services
from tests.integration.test_ingest_expiry import expiry_body
from tests.integration.test_signals import P, running, send, wait
from tests.support.runs import create_runs

WEEK = 7 * 86400.0


async def ended_at(db: Database, run_id: uuid.UUID) -> list[Any]:
    async with db.platform() as conn:
        return [
            r["run_ended_at"]
            for r in await conn.fetch(
                "SELECT run_ended_at FROM awooop_signals WHERE run_id = $1 ORDER BY sent_at",
                run_id,
            )
        ]


async def age(db: Database, days: int) -> None:
    """Every marked signal ended ``days`` ago."""
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_signals SET run_ended_at = now() - make_interval(days => $1) "
            "WHERE run_ended_at IS NOT NULL",
            days,
        )


async def test_a_runs_end_marks_its_undelivered_signals_and_a_retry_unmarks_them(
    db: Database,
) -> None:
    cancelled, failed, completed = [await running(db) for _ in range(3)]
    for run_id in (failed, completed):
        await send(db, run_id, {"n": 1}, "kept")
    await wait(db, cancelled)
    assert (await send(db, cancelled, {"n": 2}, "delivered")).delivered
    assert not (await send(db, cancelled, {"n": 3}, "kept", name="other")).delivered
    assert await ended_at(db, cancelled) == [None, None]
    await db.in_tenant(P, lambda c: control.cancel(c, cancelled, actor="ops", reason="stop"))
    assert None not in await ended_at(db, cancelled)  # delivered or not

    def fail(_s: Any, now: Any) -> RunFailed:
        return RunFailed(at=now, reason="boom", code="E-HANDLER-001", worker_id="w1", attempt=1)

    await db.in_tenant(P, lambda c: run_rows.record(c, failed, fail))
    assert None not in await ended_at(db, failed)
    await db.in_tenant(P, lambda c: control.retry(c, failed, actor="ops", extra_attempts=1))
    assert await ended_at(db, failed) == [None]  # it lives again: a wait may take it

    # The worker's one-statement completion (complete_many.sql) marks too.
    async with db.tenant(P) as conn:
        await batches.complete_many(conn, [completed], ["w1"], [1], [{"ok": True}], [None])
    assert await status(db, completed) == "COMPLETED"
    assert None not in await ended_at(db, completed)


async def status(db: Database, run_id: uuid.UUID) -> str:
    async with db.tenant(P) as conn:
        found = await conn.fetchval("SELECT status FROM awooop_run_state WHERE run_id = $1", run_id)
    return str(found)


async def test_a_producers_signal_committed_after_the_runs_end_is_marked_by_the_loop(
    db: Database,
) -> None:
    run_id = await running(db)
    await db.in_tenant(P, lambda c: control.cancel(c, run_id, actor="ops", reason="stop"))
    async with db.platform_writes() as conn:  # as a producer's transaction that raced the end
        await conn.execute(
            "INSERT INTO awooop_signals (signal_id, project_id, run_id, name, signal_key, "
            "payload, sent_by, pending) VALUES ($1, $2, $3, 'paid', 'k1', '1', 'p', true)",
            uuid.uuid4(),
            P,
            run_id,
        )
    assert await ended_at(db, run_id) == [None]
    assert await db.in_platform_writes(lambda c: signals.deliver_pending(c, 10)) == (1, 0)
    assert None not in await ended_at(db, run_id)


async def test_finished_runs_signals_go_after_the_retention_in_batches_through_their_index(
    db: Database,
) -> None:
    live = await running(db)
    await wait(db, live, match={"never": True})
    live_kept = [await send(db, live, {"n": n}, f"live-{n}") for n in range(3)]
    old = await running(db)
    for n in range(3):
        await send(db, old, {"n": n}, f"old-{n}")
    await wait(db, old)  # takes old-0: delivered, its payload in the run's events
    await send(db, old, {"n": 3}, "old-3")
    await db.in_tenant(P, lambda c: control.cancel(c, old, actor="ops", reason="stop"))
    await age(db, 8)
    recent = await running(db)
    await send(db, recent, {}, "recent")
    await db.in_tenant(P, lambda c: control.cancel(c, recent, actor="ops", reason="stop"))
    async with db.platform_writes() as conn:  # many live runs' signals, for the planner
        await conn.execute(
            "INSERT INTO awooop_signals (signal_id, project_id, run_id, name, signal_key, "
            "payload, sent_by) SELECT gen_random_uuid(), $1, gen_random_uuid(), 'x', 'k', "
            "'{}', 't' FROM generate_series(1, 5000)",
            P,
        )
        await conn.execute("ANALYZE awooop_signals")
        plan = "\n".join(
            r[0] for r in await conn.fetch("EXPLAIN " + signal_retention.EXPIRE, WEEK, 1000)
        )
    assert "awooop_signals_finished_idx" in plan and "Seq Scan on awooop_signals" not in plan, plan

    assert await signal_retention.expire_once(db, WEEK, batch=2) == 4  # batches of 2: 2 + 2 + 0
    async with db.platform() as conn:
        left = {
            r["signal_key"]
            for r in await conn.fetch(
                "SELECT signal_key FROM awooop_signals WHERE run_id = ANY($1)",
                [live, old, recent],
            )
        }
    assert left == {"live-0", "live-1", "live-2", "recent"}
    assert all(not s.delivered for s in live_kept)
    assert await signal_retention.expire_once(db, WEEK) == 0
    async with db.platform() as conn:  # the record of the signal the wait took at once
        taken = await conn.fetchrow(
            "SELECT data, metadata FROM awooop_events "
            "WHERE stream_id = $1 AND event_type = 'StepCompleted'",
            run_stream_id(old),
        )
    assert taken["data"]["result"] == {"n": 0}
    assert (taken["metadata"]["signal"]["key"], taken["metadata"]["signal"]["sent_by"]) == (
        "old-0",
        "t",
    )


async def test_the_dedupe_expiry_loop_runs_the_retention(services: Services) -> None:
    db = services.db
    assert services.settings.signal_retention_s == WEEK  # the default
    [run_id] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "w1", 30)) is not None
    await send(db, run_id, {}, "k")
    await db.in_tenant(P, lambda c: control.cancel(c, run_id, actor="ops", reason="stop"))
    await age(db, 6)
    await expiry_body(services)
    assert len(await ended_at(db, run_id)) == 1  # six days: kept
    await age(db, 8)
    await expiry_body(services)
    assert await ended_at(db, run_id) == []
