"""A poison run among innocent ones on one worker process (R-13, R-19): the run that kills its
worker is found out by running the suspects alone, and only its own deaths are charged.

One ``awooop worker --concurrency 10`` at a time (the test restarts it after each death, as a
supervisor would), the relay and the reaper in ``awooop loops run``. 20 innocent runs (each
sleeps 2 s) and one poison run (``os._exit`` 0.5 s into every attempt) submitted together:
the poison's first death takes the runs in flight with it; they come back as suspects,
uncharged, and run alone one at a time; the poison, alone, kills its worker again until its
attempts are spent."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunFailed, RunRequeued
from tests.support.handlers import read_effects
from tests.support.runs import create_runs, events_of, load
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, cli

P = "proj-isolation"
HANDLER = "tests.support.handlers:exits_when_told"
INNOCENT = {"sleep": 2.0}
POISON = {"exit": True, "after_s": 0.5}
MAX_ATTEMPTS = 3

pytestmark = pytest.mark.fast("poison")


def cli_json(settings: Settings, *args: str) -> Any:
    done = cli(settings, *args, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return msgspec.json.decode(done.stdout)


async def statuses_of(db: Database, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    return {r: (await load(db, P, r)).status for r in run_ids}


@pytest.mark.long(30)
@pytest.mark.connections(22)
async def test_a_poison_run_is_isolated_and_failed_while_the_runs_it_shared_a_worker_with_complete(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    effects_path = str(tmp_path / "effects.jsonl")
    env = {"AWOOOP_TEST_SIDE_EFFECTS": effects_path}
    loops = WorkerProcess(
        fast, tmp_path, "loops", command=("loops", "run", "relay", "run-reaper")
    ).start()
    started: list[WorkerProcess] = []

    def start_worker() -> WorkerProcess:
        proc = WorkerProcess(
            fast,
            tmp_path,
            f"w{len(started)}",
            handler=HANDLER,
            args=("--concurrency", "10"),
            env=env,
        ).start()
        started.append(proc)
        return proc

    try:
        current = start_worker()
        current.worker_id()
        first = await create_runs(db, P, 5, max_attempts=MAX_ATTEMPTS, payload=INNOCENT)
        [poison] = await create_runs(db, P, 1, max_attempts=MAX_ATTEMPTS, payload=POISON)
        rest = await create_runs(db, P, 15, max_attempts=MAX_ATTEMPTS, payload=INNOCENT)
        innocent = first + rest
        everyone = [*innocent, poison]

        # Supervise: restart the worker after each death until every run is finished.
        dead: dict[str, int] = {}  # worker id -> exit code
        deadline = time.monotonic() + 300
        while True:
            now_status = await statuses_of(db, everyone)
            if all(s in ("COMPLETED", "FAILED", "CANCELLED") for s in now_status.values()):
                break
            assert time.monotonic() < deadline, (
                f"not finished in 300 s: {now_status}\n{current.logs()[-3000:]}"
            )
            code = current.process.poll() if current.process is not None else None
            if code is not None:
                dead[current.worker_id()] = code
                current = start_worker()
                current.worker_id()
            await asyncio.sleep(0.2)

        # The innocent runs completed, and no death was charged to any of them.
        for run_id in innocent:
            state = await load(db, P, run_id)
            assert state.status == "COMPLETED", (run_id, state.failure_reason)
            events = await events_of(db, P, run_id)
            requeues = [e for e in events if isinstance(e, RunRequeued)]
            assert all(e.suspect for e in requeues), (run_id, requeues)
            # attempt_count counts claims (the fence); max_attempts moved up with each
            # uncharged one, so the budget left is what one successful attempt leaves.
            assert state.max_attempts - state.attempt_count == MAX_ATTEMPTS - 1, state
            assert state.max_attempts == MAX_ATTEMPTS + len(requeues)

        # The poison run: FAILED, the reason naming it and its deaths alone, dead-lettered once.
        failed = await load(db, P, poison)
        assert (failed.status, failed.failure_code) == ("FAILED", "E-RUN-004")
        assert failed.failure_reason is not None
        assert f"run {poison} killed its worker 3 times while running alone" in (
            failed.failure_reason
        ), failed.failure_reason
        poison_events = await events_of(db, P, poison)
        charged = [e for e in poison_events if isinstance(e, RunRequeued) and not e.suspect]
        finals = [e for e in poison_events if isinstance(e, RunFailed)]
        assert (len(charged), len(finals)) == (2, 1)
        assert finals[0].dead_letter

        # Every worker that died was killed by the poison run, never by an innocent one.
        effects = read_effects(effects_path)
        exits = [e for e in effects if e["what"] == "exit"]
        assert {e["run_id"] for e in exits} == {str(poison)}
        assert sorted(e["worker_id"] for e in exits) == sorted(dead), (exits, dead)
        assert set(dead.values()) == {1}
        assert len(dead) in (3, 4)  # a first death shared with innocents is not counted

        # The scenario happened: innocent runs were in flight on a worker the poison killed
        # and came back as suspects; each suspect's last attempt ran alone on its worker.
        killed_in_flight = {
            e["run_id"]
            for e in effects
            if e["what"] == "start"
            and e["worker_id"] in dead
            and not any(
                d["what"] == "done" and d["run_id"] == e["run_id"] and d["worker_id"] in dead
                for d in effects
            )
        }
        assert killed_in_flight, "no innocent run was in flight when the poison killed a worker"
        for run_id in killed_in_flight:
            state = await load(db, P, uuid.UUID(run_id))
            assert state.suspect_worker_id in dead
            [start] = [
                e
                for e in effects
                if e["run_id"] == run_id
                and e["what"] == "start"
                and e["attempt"] == state.attempt_count
            ]
            [done] = [e for e in effects if e["run_id"] == run_id and e["what"] == "done"]
            meanwhile = [
                e
                for e in effects
                if e["worker_id"] == start["worker_id"]
                and e["run_id"] != run_id
                and start["t"] <= e["t"] <= done["t"]
            ]
            assert meanwhile == [], (run_id, meanwhile)

        # One dead letter, the poison's.
        async def dead_lettered() -> bool:
            return len(cli_json(fast, "deadletters", "list")) >= 1

        await eventually(dead_lettered, timeout_s=30, what="the dead letter")
        entries = cli_json(fast, "deadletters", "list")
        assert [(e["run_id"], e["event_type"]) for e in entries] == [(str(poison), "RunFailed")]
    finally:
        for proc in started:
            proc.stop()
        loops.stop()
