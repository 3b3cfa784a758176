"""The timers loop is fair across projects (run_lock_wait_due.sql, migration 0143): one project's
thousands of due waits do not hold another project's due wait back for more than one batch,
each batch goes round-robin over the projects with due waits, and the statement reads the
waits only through awooop_run_waits_project_due_idx, with a cost that does not grow with the
number of due waits. Real Postgres; the sleeping runs are written straight into the tables as
the write path leaves them (the run row, its stream's head, its open wait)."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from awooop.core.db import Database
from awooop.eventlog import run_reads
from awooop.loops import timers as timers_loop
from awooop.runs import timers
from tests.support.runs import event_types, load
from tests.support.sleepers import analyze, sleepers

A, B, C = "proj-timers-a", "proj-timers-b", "proj-timers-c"
BATCH = 500


async def test_one_projects_thousands_of_due_timers_hold_another_back_one_batch_at_most(
    db: Database, database_url: str
) -> None:
    """A's 5,000 waits came due a moment before B's one (earliest-first alone would fire B
    in the 11th batch); C's wait is due in an hour. The first batch fires B's and 499 of A's,
    every batch a full one."""
    now = datetime.now(UTC)
    a_runs = await sleepers(db, A, 5000, now - timedelta(seconds=2))
    [b_run] = await sleepers(db, B, 1, now - timedelta(seconds=1))
    [c_run] = await sleepers(db, C, 1, now + timedelta(hours=1))
    await analyze(database_url)

    first = await db.in_platform_writes(lambda c: timers.fire_due(c, BATCH))
    projects = Counter(state.project_id for state, _ in first)
    assert projects == {A: BATCH - 1, B: 1}, projects
    assert (await load(db, B, b_run)).status == "RESUMED"
    assert (await event_types(db, B, b_run))[-1] == "TimerFired"

    fired, more = await timers_loop.fire_once(db, BATCH)
    assert (fired, more) == (5000 - (BATCH - 1), False)
    assert {(await load(db, A, r)).status for r in a_runs[::250]} == {"RESUMED"}
    assert (await load(db, C, c_run)).status == "WAITING_EVENT"  # not due


async def test_each_batch_goes_round_robin_over_the_projects_with_due_waits(
    db: Database, database_url: str
) -> None:
    """Three projects with 40, 5 and 1 due waits (A's the earliest), batches of 12: the
    first batch takes each one's share of 4 (4 + 4 + 1) and fills the rest with the earliest
    due (A's); the second, A's and B's shares of 6 and the fill; then A alone."""
    now = datetime.now(UTC)
    for project, count in ((A, 40), (B, 5), (C, 1)):
        await sleepers(db, project, count, now - timedelta(seconds=count))
    await analyze(database_url)
    batches = []
    while fired := await db.in_platform_writes(lambda c: timers.fire_due(c, 12)):
        batches.append(Counter(state.project_id for state, _ in fired))
    assert batches == [{A: 7, B: 4, C: 1}, {A: 11, B: 1}, {A: 12}, {A: 10}], batches


async def test_the_fair_pick_reads_the_waits_through_their_project_index(
    db: Database, database_url: str
) -> None:
    now = datetime.now(UTC)
    await sleepers(db, A, 20000, now - timedelta(seconds=1))
    for project in (B, C):
        await sleepers(db, project, 50, now + timedelta(minutes=5))
    await sleepers(db, B, 1, now - timedelta(seconds=1))
    await analyze(database_url)
    async with db.platform_writes() as conn:
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS) " + run_reads.LOCK_WAIT_DUE, BATCH, 0.2
            )
        )
    assert "awooop_run_waits_project_due_idx" in plan, plan
    assert "awooop_run_state_pkey" in plan, plan  # the picked runs by their key
    assert "Seq Scan on awooop_run_waits" not in plan, plan
    assert "Seq Scan on awooop_run_state" not in plan, plan
    # The waits read: one probe per project, A's share and B's one, the fill; not A's 20,000.
    read = [
        re.search(r"actual time=\S+ rows=(\d+) loops=(\d+)", line)
        for line in plan.splitlines()
        if "on awooop_run_waits" in line
    ]
    assert read and all(read), plan
    assert sum(int(m[1]) * int(m[2]) for m in read if m) < 3 * BATCH, plan
