"""``replay run_state``: rebuild awooop_run_state from the log, verify it, swap it in (R-32)."""

from __future__ import annotations

import asyncio
from typing import Any

from awooop.db import Database
from awooop.runs.state import COLUMNS
from projections.registry import get
from projections.replay import Replay, replay
from tests.support.projection_workload import Workload

SNAPSHOT = f"SELECT {', '.join(COLUMNS)} FROM awooop_run_state ORDER BY run_id"


async def live_rows(db: Database) -> list[dict[str, Any]]:
    async with db.platform() as conn:
        return [dict(r.items()) for r in await conn.fetch(SNAPSHOT)]


async def test_after_a_random_workload_verify_finds_no_difference(
    db: Database, database_url: str
) -> None:
    work = Workload(db)
    await work.run(walkers=4, runs_each=8, max_steps=12)
    assert work.heartbeats > 0
    report = await replay(database_url, get("run_state"))
    assert report.differences == 0, report.lines()
    assert report.bulk_events + report.tail_events == work.events
    assert report.rows["awooop_run_state"] == len(work.run_ids)


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
