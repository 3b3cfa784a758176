"""The ``bulk_operations`` loop (awooop/loops/bulk_operations.py): an operation whose executor
died is finished by the loop, each run changed once, also when two loops take it at once; a
moving operation is left to its executor; an iteration is bounded and the next one continues;
a filter's blocked_on reason is decided as the console decides it; the console's page of a
stalled operation says the loop will resume it."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter

import asyncpg
import pytest

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Connection, Database
from awooop.core.events import run_stream_id
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.ingest import credentials
from awooop.loops import bulk_operations
from awooop.loops.registry import all_loops
from awooop.runs import bulk, listing
from awooop.runs.blocked import Reason
from awooop.services import Services
from tests.integration.test_blocked_on import dead_letter_message
from tests.integration.test_bulk_actions import events_by_run
from tests.integration.test_console import log_in
from tests.support.http import app_client
from tests.support.runs import create_failed_runs, create_runs
from tests.support.waiting import eventually

P = "proj-bulk-loop"

AGE = "UPDATE awooop_operations SET updated_at = now() - interval '1 hour' WHERE operation_id = $1"
# Backends of this database waiting for a lock. Not "blocked by the holder": the second
# waiter for a row waits for the first waiter (which holds the row's tuple lock). Asked
# outside a transaction: pg_stat_activity is read once per transaction and then kept.
WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0
"""
HOLD = "SELECT 1 FROM awooop_operations WHERE operation_id = $1 FOR UPDATE"


async def started_and_died(
    db: Database, runs: int, *, aged: bool = True
) -> tuple[list[uuid.UUID], bulk.Operation]:
    """``runs`` FAILED runs and a retry of them that did one batch of 100 before its process
    died; ``aged``: its last batch an hour ago, past the stall threshold."""
    failed = await create_failed_runs(db, P, runs)
    f = listing.RunFilter(project=P)
    op = await db.in_tenant(
        P, lambda c: bulk.create(c, "retry", f, actor="cli:test", via="cli", expected=runs)
    )
    first = await db.in_tenant(P, lambda c: bulk.run_batch(c, op.operation_id))
    assert (first.state, first.scanned, first.changed, first.batches) == ("running", 100, 100, 1)
    if aged:
        await age(db, op.operation_id)
    return failed, op


async def age(db: Database, operation_id: uuid.UUID) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(AGE, operation_id)


async def get(db: Database, operation_id: uuid.UUID) -> bulk.Operation:
    return await db.in_platform(lambda c: bulk.get(c, operation_id))


def the_loop(services: Services) -> LoopSpec:
    (spec,) = [s for s in all_loops(services) if s.name == bulk_operations.LOOP_NAME]
    return spec


async def check_each_run_changed_once(
    db: Database, failed: list[uuid.UUID], op: bulk.Operation
) -> None:
    final = await get(db, op.operation_id)
    n = len(failed)
    assert final.state == "done" and final.finished_at is not None
    assert (final.scanned, final.changed, final.refused, final.skipped) == (n, n, 0, 0)
    events = await events_by_run(db, P, "RunRetried")
    assert set(events) == {run_stream_id(r) for r in failed}
    assert Counter(len(metas) for metas in events.values()) == Counter({1: len(failed)})
    assert {
        (m["actor"], m["operation_id"], m["via"]) for metas in events.values() for m in metas
    } == {("cli:test", str(op.operation_id), "cli")}


async def test_the_loop_finishes_an_operation_whose_process_died(
    services: Services, db: Database
) -> None:
    spec = the_loop(services)
    assert spec.category is LoopCategory.PLATFORM
    assert spec.interval_s == services.settings.bulk_operations_interval_s
    failed, op = await started_and_died(db, 250, aged=False)

    # Its executor may still be alive: an operation that moved recently is left to it.
    await spec.body(LoopContext(project_id=PLATFORM_PROJECT))
    assert (await get(services.db, op.operation_id)).batches == 1

    await age(db, op.operation_id)  # no batch for an hour: its process is gone
    await spec.body(LoopContext(project_id=PLATFORM_PROJECT))
    await check_each_run_changed_once(db, failed, op)
    # 100 by hand, then 100 and 50 (the look that finds the end is not a batch).
    assert (await get(db, op.operation_id)).batches == 3


@pytest.mark.connections(10)
async def test_two_loops_on_one_stalled_operation_change_each_run_once(
    services: Services, db: Database, database_url: str
) -> None:
    failed, op = await started_and_died(db, 250)
    one, two = the_loop(services), the_loop(services)  # two processes' loops

    # Hold the operation's row until both loops wait for it: both took it for stalled.
    holder, watcher = await asyncpg.connect(database_url), await asyncpg.connect(database_url)
    running: list[asyncio.Future[None]] = []
    try:
        async with holder.transaction():
            await holder.execute(HOLD, op.operation_id)
            running += [
                asyncio.ensure_future(spec.body(LoopContext(project_id=PLATFORM_PROJECT)))
                for spec in (one, two)
            ]
            await eventually(
                lambda: watcher.fetchval(WAITING),
                equals=2,
                what="both loops waiting for the operation's row",
            )
        await asyncio.gather(*running)
    finally:
        for task in running:
            task.cancel()  # only when the test failed before they ended
        await asyncio.gather(*running, return_exceptions=True)
        await holder.close()
        await watcher.close()
    await check_each_run_changed_once(db, failed, op)


async def test_an_iteration_is_bounded_and_the_next_one_continues(
    services: Services, db: Database
) -> None:
    failed, op = await started_and_died(db, 250)
    decide = bulk_operations.decider(services)
    resumer = bulk_operations.Resumer(db, decide, max_batches=1)
    other = bulk_operations.Resumer(db, decide)  # another process's loop

    assert await resumer.once() is True  # one batch, more to do: wake up again at once
    after = await get(db, op.operation_id)
    assert (after.state, after.scanned, after.batches) == ("running", 200, 2)
    # The batch moved updated_at: to another loop the operation is not stalled any more.
    assert await other.once() is False
    assert (await get(db, op.operation_id)).batches == 2
    # The loop that left it unfinished takes it again: the last 50, then the end.
    assert await resumer.once() is True
    assert await resumer.once() is False
    assert await resumer.once() is False  # nothing left to do
    await check_each_run_changed_once(db, failed, op)


async def test_the_console_says_the_loop_resumes_a_stalled_operation(
    settings: Settings, db: Database
) -> None:
    _, token = await credentials.create_management_token(db, P, "manage")
    failed, op = await started_and_died(db, 150)
    async with app_client(settings, db) as http:
        await log_in(http, token)
        page = await http.get(f"/ui/operations/{op.operation_id}")
        assert page.status_code == 200
        assert re.search(r'id="stalled">No batch for 30 s', page.text)
        assert "<code>bulk_operations</code> loop" in page.text
        assert 'http-equiv="refresh" content="5"' in page.text
        assert 'id="resume">Resume now<' in page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        resumed = await http.post(
            f"/ui/operations/{op.operation_id}/resume", data={"csrf": csrf.group(1)}
        )
        assert resumed.status_code == 303
        await eventually(
            lambda: _state(db, op.operation_id), equals="done", what="the resumed operation done"
        )
        page = await http.get(f"/ui/operations/{op.operation_id}")
        assert "stalled" not in page.text and "refresh" not in page.text
    await check_each_run_changed_once(db, failed, op)


async def _state(db: Database, operation_id: uuid.UUID) -> str:
    return (await get(db, operation_id)).state


async def test_the_loop_keeps_to_the_blocked_on_reason_of_the_filter(
    services: Services, db: Database
) -> None:
    pending = await create_runs(db, P, 20)
    lettered = pending[:5]
    for run_id in lettered:  # an open dead letter each
        await dead_letter_message(services, P, run_id)
    f = listing.RunFilter(project=P, reason=Reason.PENDING_DEAD_LETTERED)

    async def create(conn: Connection) -> bulk.Operation:
        return await bulk.create(
            conn, "cancel", f, actor="cli:test", via="cli", expected=5, reason="stuck"
        )

    op = await db.in_tenant(P, create)
    await age(db, op.operation_id)  # confirmed, and its process died before the first batch
    await the_loop(services).body(LoopContext(project_id=PLATFORM_PROJECT))
    final = await get(db, op.operation_id)
    # The SQL takes every PENDING run; the loop's blocked_on decision keeps the dead-lettered.
    assert (final.state, final.scanned, final.changed, final.skipped) == ("done", 20, 5, 15)
    events = await events_by_run(db, P, "RunCancelled")
    assert set(events) == {run_stream_id(r) for r in lettered}
