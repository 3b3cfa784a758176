"""Child runs with worker processes (the real CLI, docs/workers.md, Child runs): a parent of 100
children on workers of ONE slot each (the parent holds none while it waits), with a kill -9 of
the worker while the parent is creating its children and another while the children run:
exactly 100 children, each once, and the parent resumes once with every outcome in order."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.eventlog.child_state import dedupe_key
from tests.support.handlers import read_effects
from tests.support.runs import all_finished, create_runs, event_types, load
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, relay_process

P = "proj-family"
FAMILY = "tests.support.durable_handlers:family"
CHILDREN = 100

pytestmark = pytest.mark.fast("processes")


async def children(db: Database, parent: object, status: str | None = None) -> int:
    async with db.platform() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM awooop_run_state WHERE parent_run_id = $1 "
                "AND ($2::text IS NULL OR status = $2)",
                parent,
                status,
            )
        )


@pytest.mark.long(25)
@pytest.mark.connections(18)
async def test_a_hundred_children_survive_a_kill_9_during_creation_and_during_completion(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    effects = str(tmp_path / "effects.jsonl")
    env = {"AWOOOP_TEST_SIDE_EFFECTS": effects, "AWOOOP_LOG_LEVEL": "warning"}
    args = ("--with-loops", "--concurrency", "1")
    # Each child takes 50 ms: the parent is back and waiting long before the last one ends.
    payload = {"children": CHILDREN, "start_pause_s": 0.02, "child": {"sleep_s": 0.05}}
    [parent] = await create_runs(db, P, payload=payload)
    relay = relay_process(fast, tmp_path).start()
    procs: list[WorkerProcess] = []

    def start(name: str) -> WorkerProcess:
        proc = WorkerProcess(fast, tmp_path, name, handler=FAMILY, args=args, env=env).start()
        procs.append(proc)
        proc.worker_id()
        return proc

    def kill(proc: WorkerProcess) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    try:
        creating = start("w0")
        await eventually(
            lambda: _at_least(db, parent, 30), timeout_s=60, what="30 children created"
        )
        kill(creating)  # mid-creation: some start_child transactions committed, one maybe not
        created_before = await children(db, parent)
        assert created_before < CHILDREN
        completing = start("w1")
        await eventually(
            lambda: _at_least(db, parent, 50, "COMPLETED"),
            timeout_s=90,
            what="50 children completed",
        )
        kill(completing)  # mid-completion: one child's attempt in flight
        start("w2")
        await eventually(lambda: all_finished(db, [parent]), timeout_s=120, what="the parent")
    finally:
        for proc in [*procs, relay]:
            proc.stop()
    state = await load(db, P, parent)
    assert state.status == "COMPLETED", state
    assert await children(db, parent) == CHILDREN
    assert await children(db, parent, "COMPLETED") == CHILDREN
    results = state.result["results"]
    assert [r["key"] for r in results] == [f"c{i}" for i in range(CHILDREN)]
    assert [r["result"] for r in results] == [{"i": i, "twice": 2 * i} for i in range(CHILDREN)]
    async with db.platform() as conn:
        keys = await conn.fetch(
            "SELECT provider_event_id FROM awooop_run_state WHERE parent_run_id = $1", parent
        )
        dedupe = await conn.fetchval(
            "SELECT count(DISTINCT provider_event_id) FROM awooop_channel_event_dedupe "
            "WHERE provider_event_id LIKE $1",
            f"child:{parent}:%",
        )
    assert sorted(r["provider_event_id"] for r in keys) == sorted(
        dedupe_key(parent, f"c{i}") for i in range(CHILDREN)
    )
    assert dedupe == CHILDREN
    types = await event_types(db, P, parent)
    assert types.count("RunCompleted") == 1
    # The wait ended once: resumed by the last child it needed (ChildrenFinished), or, when
    # the children finished while the parent was away (the kills), at once when it started.
    wait = state.saga_steps["children:1"]
    if "kind" in wait:
        assert types.count("WaitStarted") == types.count("ChildrenFinished") == 1
    else:
        assert "WaitStarted" not in types and "ChildrenFinished" not in types
    assert state.attempt_count >= 2  # the kill during creation cost it an attempt
    done = Counter(e["what"] for e in read_effects(effects))
    assert done["parent:after"] == 1  # resumed once
    assert CHILDREN <= done["child"] <= CHILDREN + 1  # one child's step may be cut by the kill


async def _at_least(db: Database, parent: object, count: int, status: str | None = None) -> bool:
    return await children(db, parent, status) >= count
