"""``replay run_state``: rebuild awooop_run_state from the log, verify it, swap it in (R-32)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from awooop.core.db import Database
from awooop.eventlog.state import COLUMNS
from awooop.projections.registry import get
from awooop.projections.replay import Replay, replay
from awooop.runs import leases, run_rows
from tests.support.factories import event_for
from tests.support.projection_workload import Workload

SNAPSHOT = f"SELECT {', '.join(COLUMNS)} FROM awooop_run_state ORDER BY run_id"


async def live_rows(db: Database) -> list[dict[str, Any]]:
    async with db.platform() as conn:
        return [dict(r.items()) for r in await conn.fetch(SNAPSHOT)]


@pytest.mark.connections(13)
async def test_after_a_random_workload_verify_finds_no_difference(
    db: Database, database_url: str
) -> None:
    work = Workload(db)
    await work.run(walkers=4, runs_each=8, max_steps=12)
    assert work.heartbeats > 0
    report = await replay(database_url, get("run_state"))
    assert report.differences == 0, report.lines()
    # Other sessions' transactions on the shared server can hold the commit-safe catch-up
    # back; the verify snapshot then applies the rest.
    assert report.bulk_events + report.tail_events + report.snapshot_events == work.events
    assert len(await live_rows(db)) == len(work.run_ids)


@pytest.mark.connections(11)
async def test_swap_while_writers_keep_running_changes_nothing_observable(
    db: Database, database_url: str
) -> None:
    work = Workload(db, seed=11)
    await work.run(walkers=3, runs_each=6, max_steps=8)
    async with db.platform() as conn:
        oid_before = await conn.fetchval("SELECT 'awooop_run_state'::regclass::oid")

    writers = asyncio.create_task(Workload(db, seed=12).run(walkers=3, runs_each=6, max_steps=8))
    report = await Replay(database_url, get("run_state"), lock_timeout_s=0.5).run(swap=True)
    await writers
    assert report.swapped and report.lock_ms is not None

    async with db.platform() as conn:
        oid_after = await conn.fetchval("SELECT 'awooop_run_state'::regclass::oid")
    assert oid_after != oid_before  # a new table took the name ...
    after = await replay(database_url, get("run_state"))
    assert after.differences == 0, after.lines()  # ... and writers went on writing into it

    quiet_before = await live_rows(db)
    again = await replay(database_url, get("run_state"), swap=True)
    assert again.differences == 0 and again.swapped
    assert await live_rows(db) == quiet_before  # lease clocks included


@pytest.mark.connections(9)
async def test_a_corrupted_row_is_reported_and_repaired_by_swap(
    db: Database, database_url: str
) -> None:
    work = Workload(db, seed=21)
    await work.run(walkers=2, runs_each=6, max_steps=6)
    (_, corrupt), (_, deleted), *_ = work.run_ids
    bogus = uuid.uuid4()
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET attempt_count = attempt_count + 7, saga_steps = "
            "'{\"forged\": 1}' WHERE run_id = $1",
            corrupt,
        )
        row = await conn.fetchrow("SELECT * FROM awooop_run_state WHERE run_id = $1", deleted)
        await conn.execute("DELETE FROM awooop_run_state WHERE run_id = $1", deleted)
        values = dict(row.items()) | {"run_id": bogus}
        cols = ", ".join(values)
        params = ", ".join(f"${i + 1}" for i in range(len(values)))
        await conn.execute(
            f"INSERT INTO awooop_run_state ({cols}) VALUES ({params})", *values.values()
        )

    report = await replay(database_url, get("run_state"))
    (diff,) = report.diffs
    assert (diff.missing, diff.extra, diff.different) == (1, 1, 1)
    text = "\n".join(report.lines())
    assert f"different run_id={corrupt} (attempt_count, saga_steps)" in text
    assert f"missing run_id={deleted}" in text
    assert f"extra run_id={bogus}" in text

    repaired = await replay(database_url, get("run_state"), swap=True)
    assert repaired.swapped and repaired.differences == 3
    assert (await replay(database_url, get("run_state"))).differences == 0
    async with db.platform_writes() as conn:
        assert (
            await conn.fetchval("SELECT count(*) FROM awooop_run_state WHERE run_id = $1", bogus)
            == 0
        )
        assert (
            await conn.fetchval("SELECT count(*) FROM awooop_run_state WHERE run_id = $1", deleted)
            == 1
        )


async def test_a_lease_clock_behind_the_log_is_a_difference(
    db: Database, database_url: str
) -> None:
    """Heartbeats only move the lease clock forward: a live value earlier than the log's is
    corruption; a later one (a renewal) is not."""
    work = Workload(db, seed=5)
    run_id = await work.create("alpha")
    async with db.tenant("alpha") as conn:
        await run_rows.record(conn, run_id, lambda s, now: event_for("RunClaimed", s, at=now))
    await work.heartbeat()
    assert (await replay(database_url, get("run_state"))).differences == 0
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = lease_until - interval '1 hour' "
            "WHERE run_id = $1",
            run_id,
        )
    report = await replay(database_url, get("run_state"))
    assert report.diffs[0].examples["different"] == [f"{run_id} (lease_until)"]


async def test_the_reported_step_is_not_compared_and_a_swap_keeps_it(
    db: Database, database_url: str
) -> None:
    """The step a running attempt is in (written by the renewal, migration 0127) is outside
    the fold, like the lease clock: verify ignores it and a swap carries it over."""
    work = Workload(db, seed=7)
    run_id = await work.create("alpha")
    async with db.tenant("alpha") as conn:
        state = await run_rows.record(
            conn, run_id, lambda s, now: event_for("RunClaimed", s, at=now)
        )
    assert state.worker_id is not None
    started = datetime.now(UTC)
    renewed = await db.in_platform_writes(
        lambda c: leases.heartbeat(
            c,
            state.worker_id or "",
            {run_id: state.attempt_count},
            600,
            {run_id: ("slow", started)},
        )
    )
    assert renewed == {run_id}
    step_sql = (
        "SELECT current_step, current_step_started_at, current_step_attempt "
        "FROM awooop_run_state WHERE run_id = $1"
    )
    async with db.platform() as conn:
        before = dict((await conn.fetchrow(step_sql, run_id)).items())
    assert before == {
        "current_step": "slow",
        "current_step_started_at": started,
        "current_step_attempt": state.attempt_count,
    }
    assert (await replay(database_url, get("run_state"))).differences == 0
    swapped = await replay(database_url, get("run_state"), swap=True)
    assert swapped.swapped and swapped.differences == 0
    async with db.platform() as conn:
        assert dict((await conn.fetchrow(step_sql, run_id)).items()) == before


@pytest.mark.parametrize("name", ["run_state", "run_state_view"])
@pytest.mark.connections(12)
async def test_bulk_workers_fold_the_log_as_one_process_does(
    db: Database, database_url: str, name: str
) -> None:
    await Workload(db, seed=17).run(walkers=3, runs_each=8, max_steps=8)
    single = await Replay(database_url, get(name)).run(swap=True)
    assert single.swapped
    parallel = await Replay(database_url, get(name), workers=3).run(swap=False)
    assert parallel.differences == 0, parallel.lines()
    assert parallel.rows == single.rows
    assert parallel.bulk_events + parallel.snapshot_events == (
        single.bulk_events + single.tail_events + single.snapshot_events + single.lock_events
    )
