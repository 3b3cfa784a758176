"""Child runs' results on real Postgres: a wait's journal entry keeps them up to
RESULTS_INLINE_MAX_BYTES in all and leaves the rest in the children's rows, which the resumed
parent reads back (docs/workers.md, Child runs)."""

from __future__ import annotations

import msgspec

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from tests.integration.test_child_runs import P, parent_with, worker
from tests.support.runs import load


async def test_large_results_stay_in_the_children_and_the_resumed_parent_reads_them(
    db: Database, fast: Settings
) -> None:
    """Three children of 100 KB results each: the parent's ChildrenFinished keeps their
    outcomes without the results (over RESULTS_INLINE_MAX_BYTES in all), and the resumed
    parent gets each result whole from the children's rows."""
    parent = await parent_with(db, children=3, child={"pad": 100_000})
    roomy = msgspec.structs.replace(fast, step_result_max_bytes=1_000_000)  # the parent's own
    await worker(db, roomy).run_until_idle()
    state = await load(db, P, parent)
    assert state.status == "COMPLETED", state
    assert [r["result"]["pad"] for r in state.result["results"]] == ["x" * 100_000] * 3
    async with db.platform() as conn:
        size, data = await conn.fetchrow(
            "SELECT octet_length(data::text), data FROM awooop_events "
            "WHERE stream_id = $1 AND event_type = 'ChildrenFinished'",
            run_stream_id(parent),
        )
    assert size < 2_000
    assert [r["result_in_child"] for r in data["results"]] == [True] * 3
