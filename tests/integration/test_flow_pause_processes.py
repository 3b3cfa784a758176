"""A pause across worker processes (the real ``awooop worker`` CLI, a relay process): no process
claims a run of the paused project, whichever receives its message, and the resume rings every
process: with the polling fallback set to 60 s, only the notice gets the waiting runs started,
each exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.runs import pauses
from awooop.runs.pause_rules import Scope
from awooop.streams.keys import WORKER_GROUP, Keys
from tests.support.handlers import read_effects
from tests.support.runs import all_finished, count_events, create_runs, load
from tests.support.waiting import eventually
from tests.support.workers import workers

P, OTHER = "proj-paused", "proj-free"
pytestmark = pytest.mark.fast("processes")


async def settled(redis: Any, keys: Keys) -> bool:
    """Every work entry of every shard delivered to the workers group and acknowledged."""
    for shard in keys.shards():
        stream = keys.work_stream(shard)
        if not await redis.exists(stream):
            continue
        for group in await redis.xinfo_groups(stream):
            if group["name"] in (WORKER_GROUP, WORKER_GROUP.encode()) and (
                group["lag"] != 0 or group["pending"] != 0
            ):
                return False
    return True


@pytest.mark.connections(27)
async def test_a_pause_holds_on_every_worker_process_and_a_resume_wakes_them_all(
    db: Database, fast: Settings, tmp_path: Path, redis: Any
) -> None:
    settings = msgspec.structs.replace(fast, poll_interval_s=60.0)
    effects = str(tmp_path / "effects.jsonl")
    await db.in_tenant(
        P, lambda c: pauses.pause(c, P, Scope.PROJECT, "", reason="deploy", actor="test")
    )
    with workers(
        settings,
        tmp_path,
        2,
        args=("--concurrency", "2"),
        env={"AWOOOP_TEST_SIDE_EFFECTS": effects},
    ) as procs:
        for proc in procs:
            proc.worker_id()
        held = await create_runs(db, P, 6, payload={})
        free = await create_runs(db, OTHER, 4, payload={})
        await eventually(lambda: all_finished(db, free), timeout_s=60, what="the free runs done")
        keys = Keys(settings.redis_key_prefix, settings.shard_count)
        await eventually(
            lambda: redis.xlen(keys.work_stream(keys.shard_of(P))),
            timeout_s=60,
            what="the held runs announced",
            equals=len(held) if keys.shard_of(P) != keys.shard_of(OTHER) else len(held + free),
        )
        await eventually(
            lambda: settled(redis, keys), timeout_s=60, what="every work entry acknowledged"
        )
        claimed = await count_events(db, "RunClaimed")
        assert [claimed[run_stream_id(r)] for r in held] == [0] * 6
        assert {str((await load(db, P, r)).status) for r in held} == {"PENDING"}

        await db.in_tenant(P, lambda c: pauses.resume(c, P, Scope.PROJECT, "", actor="test"))
        # Well within the 60 s polling fallback: the notice started them.
        await eventually(lambda: all_finished(db, held), timeout_s=30, what="the held runs done")
    claimed = await count_events(db, "RunClaimed")
    assert [claimed[run_stream_id(r)] for r in held] == [1] * 6
    firsts = Counter(e["run_id"] for e in read_effects(effects) if e["what"] == "one")
    assert [firsts[str(r)] for r in held] == [1] * 6
