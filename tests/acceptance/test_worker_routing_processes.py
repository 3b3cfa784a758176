"""Routing on worker processes (the real CLI): two `awooop worker` processes on one database,
each with its own handler and contract, 1,000 runs of both contracts, one worker killed with
SIGKILL partway and started again: every run is executed only by its contract's handler, and
completes exactly once (awooop.runs.routing; docs/workers.md, Routing runs to workers)."""

from __future__ import annotations

import os
import random
import signal
import uuid
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from tests.support.connections import fit_workers
from tests.support.handlers import read_effects
from tests.support.runs import (
    all_finished,
    all_histories,
    check_single_holder,
    count_events,
    create_runs,
)
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, relay_process

P = "proj-routes"
Q = "proj-routes-2"
HANDLERS = {"c1": "one", "c2": "two"}
SLEEP_S = 0.2  # each run's handler: 16 at once make 80 runs/s per worker, so a kill finds some

pytestmark = pytest.mark.fast("processes")


def worker(settings: Settings, directory: Path, contract: str, name: str, env: dict[str, str]):
    handler = f"tests.support.handlers:handler_{HANDLERS[contract]}"
    args = ("--contract", contract, "--concurrency", "16")
    return WorkerProcess(settings, directory, name, handler=handler, args=args, env=env)


@pytest.mark.connections(30)
async def test_two_contracts_two_handlers_one_killed_and_restarted(
    db: Database, fast: Settings, tmp_path: Path, pg_connections: int
) -> None:
    effects_file = str(tmp_path / "effects.jsonl")
    env = {"AWOOOP_TEST_SIDE_EFFECTS": effects_file, "AWOOOP_LOG_LEVEL": "warning"}
    settings = fit_workers(
        msgspec.structs.replace(fast, lease_ttl_s=3.0, heartbeat_interval_s=0.5),
        3,  # the two workers and the restarted one, for a moment together
        concurrency=16,
        granted=pg_connections,
        others=1,
    )
    contract_of: dict[str, str] = {}
    plan = [(P, "c1"), (P, "c2"), (Q, "c1"), (Q, "c2")]
    relay = relay_process(settings, tmp_path).start()
    one = worker(settings, tmp_path, "c1", "one", env).start()
    two = worker(settings, tmp_path, "c2", "two", env).start()
    restarted: WorkerProcess | None = None
    run_ids: list[uuid.UUID] = []
    try:
        one.worker_id()
        two.worker_id()
        rng = random.Random(7)

        async def wave() -> None:  # 248 runs, the contracts mixed
            for project, contract in rng.sample(plan, len(plan)):
                made = await create_runs(
                    db,
                    project,
                    62,
                    payload={"sleep": SLEEP_S},
                    contract=contract,
                    per_transaction=62,
                )
                contract_of.update((str(r), contract) for r in made)
                run_ids.extend(made)

        # Eight c1 runs that end only once the worker is killed: it dies with runs in flight
        # however fast it went through the others.
        hold = tmp_path / "killed"
        held = await create_runs(
            db, P, 8, payload={"sleep": SLEEP_S, "hold": str(hold)}, contract="c1"
        )
        contract_of.update((str(r), "c1") for r in held)
        run_ids += held
        await wave()
        await wave()

        async def part_done() -> bool:
            lines = read_effects(effects_file)
            done = sum(1 for e in lines if e["what"] == "done:one")
            taken = {e["run_id"] for e in lines if e["what"] == "handler:one"}
            return done >= 60 and taken >= {str(r) for r in held}

        await eventually(part_done, timeout_s=30, what="a part of the c1 runs done")
        os.kill(one.pid, signal.SIGKILL)  # in the middle of its runs
        one.wait()
        hold.touch()
        await wave()  # while no c1 worker lives: the c2 worker reads their messages too
        await wave()
        assert len(run_ids) == 1000
        restarted = worker(settings, tmp_path, "c1", "one-again", env).start()
        restarted.worker_id()
        await eventually(
            lambda: all_finished(db, run_ids), timeout_s=60, what="1,000 runs finished"
        )
    finally:
        for proc in (one, two, restarted, relay):
            if proc is not None:
                proc.stop()
    async with db.platform() as conn:
        outcomes = await conn.fetch(
            "SELECT status, count(*) AS n FROM awooop_run_state GROUP BY 1 ORDER BY 1"
        )
    assert [(r["status"], r["n"]) for r in outcomes] == [("COMPLETED", 1000)]
    completed = await count_events(db, "RunCompleted")
    assert sorted(completed[run_stream_id(r)] for r in run_ids) == [1] * 1000
    lines = read_effects(effects_file)
    ran = Counter((e["run_id"], e["what"].partition(":")[2]) for e in lines if ":" in e["what"])
    assert {run for run, _ in ran} == set(contract_of)
    wrong = [(run, name) for run, name in ran if name != HANDLERS[contract_of[run]]]
    assert wrong == []  # no run ever executed in the other contract's handler
    # the killed worker's runs were taken again by the restarted one, not by the c2 worker
    killed = {e["run_id"] for e in lines if e["pid"] == one.pid and e["what"] == "handler:one"}
    finished = {e["run_id"] for e in lines if e["pid"] == one.pid and e["what"] == "done:one"}
    assert killed - finished  # it died with runs in flight
    for run in killed - finished:
        after = [e for e in lines if e["run_id"] == run and e["pid"] != one.pid]
        assert after and all(e["pid"] == restarted.pid for e in after)  # type: ignore[union-attr]
    histories = await all_histories(db)
    for history in histories.values():
        check_single_holder(history)
