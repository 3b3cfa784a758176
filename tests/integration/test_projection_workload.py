"""The randomised workload of the projection tests is the seed's, however its walkers interleave."""

from __future__ import annotations

import asyncio
import uuid

from awooop.core.db import Database
from tests.support.projection_workload import Workload


async def outcome(db: Database, work: Workload) -> list[list[tuple[str, str, int]]]:
    """Per walker, per run in its order: the project, the final status, the run's events."""
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT s.run_id, s.status, h.version FROM awooop_run_state s "
            "JOIN awooop_event_streams h ON h.stream_id = 'run-' || s.run_id::text "
            "WHERE s.run_id = ANY($1::uuid[])",
            [run_id for _, run_id in work.run_ids],
        )
    found: dict[uuid.UUID, tuple[str, int]] = {
        r["run_id"]: (r["status"], r["version"]) for r in rows
    }
    return [[(p, *found[run_id]) for p, run_id in walk] for walk in work.walks]


async def test_the_same_seed_gives_the_same_runs_whatever_the_interleaving(db: Database) -> None:
    first, second = Workload(db, seed=3), Workload(db, seed=3)
    await first.run(walkers=3, runs_each=4, max_steps=5)

    # The second one's walkers interleave otherwise: walker 0 starts once the others ended.
    others_done = asyncio.Event()
    ended: list[int] = []

    async def late_walker(index: int, runs: int, max_steps: int) -> None:
        if index == 0:
            await others_done.wait()
        await Workload.walker(second, index, runs, max_steps)
        ended.append(index)
        if len(ended) == 2 and 0 not in ended:
            others_done.set()

    second.walker = late_walker  # type: ignore[method-assign]  # reorder the walkers
    await second.run(walkers=3, runs_each=4, max_steps=5)
    assert second.run_ids[0] != second.walks[0][0]  # the interleaving did change
    assert await outcome(db, second) == await outcome(db, first)
    assert len({p for walk in await outcome(db, first) for p, _, _ in walk}) > 1
