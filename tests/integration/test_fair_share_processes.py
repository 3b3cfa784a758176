"""Fair share across real processes (a relay and an ``awooop worker`` at concurrency 10): a
project that submits a small batch behind another's large backlog in the same shard stream gets
its runs started interleaved with the backlog, not after it; every run completes exactly once.
Judged by the order of starts in the log, not by wall time, so a loaded machine changes
nothing."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.streams.keys import shard_of
from tests.support.runs import all_finished, count_events
from tests.support.waiting import eventually
from tests.support.workers import workers

BUSY, SMALL = "proj-busy", "proj-b"  # one shard stream (asserted below): FIFO would serialise
BACKLOG, BATCH = 1500, 100
pytestmark = pytest.mark.fast("processes")


async def submit(db: Database, settings: Settings, project: str, count: int) -> list[uuid.UUID]:
    run_ids: list[uuid.UUID] = []
    for start in range(0, count, 500):
        events = [
            producer.ChannelEvent("api", uuid.uuid4().hex, {})
            for _ in range(min(500, count - start))
        ]
        done = await producer.submit_many(db, project, events, settings=settings)
        run_ids += [s.run_id for s in done]
    return run_ids


@pytest.mark.connections(20)
async def test_a_small_batch_is_not_served_after_a_large_backlog(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    assert shard_of(BUSY, fast.shard_count) == shard_of(SMALL, fast.shard_count)
    with workers(fast, tmp_path, 1, args=("--concurrency", "10")):
        busy = await submit(db, fast, BUSY, BACKLOG)
        small = await submit(db, fast, SMALL, BATCH)
        busy_at_small_submit = sum((await count_events(db, "RunClaimed")).values())
        everything = busy + small
        await eventually(
            lambda: all_finished(db, everything), timeout_s=240, what="every run finished"
        )
    starts = await db.in_platform(
        lambda c: c.fetch(
            "SELECT e.project_id, e.stream_id FROM awooop_events AS e"
            " WHERE e.event_type = 'RunClaimed' ORDER BY e.position"
        )
    )
    order = [r["project_id"] for r in starts]
    last_small = max(i for i, p in enumerate(order) if p == SMALL)
    busy_before_small_done = order[:last_small].count(BUSY)
    # Interleaved one for one from the moment the small batch arrived (with slack for the runs
    # already in flight and claims in progress), instead of after the whole backlog.
    assert busy_before_small_done <= busy_at_small_submit + BATCH + 60, (
        busy_at_small_submit,
        busy_before_small_done,
    )
    assert busy_before_small_done < BACKLOG - 500
    claimed = await count_events(db, "RunClaimed")
    completed = await count_events(db, "RunCompleted")
    assert {claimed[s] for s in map(run_stream_id, everything)} == {1}
    assert {completed[s] for s in map(run_stream_id, everything)} == {1}
