"""A poison run with real ``awooop`` processes (R-13, R-16, R-19): a handler that kills its
worker process on every attempt. After ``max_attempts`` the run is FAILED with a reason that
names the dead worker and has one dead letter (recorded by the reaper in the loops process with
the failure, and counted there); Redis then loses everything, and the dead letter is still
listed and still behind the DeadLetters alert's gauge; ``awooop deadletters redrive`` with a
fixed handler completes the run."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import redis.asyncio as aioredis

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.demo.servers import free_port
from tests.support.handlers import read_effects
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, cli

P = "proj-poison"
POISON = "tests.support.handlers:exits"
FIXED = "tests.support.handlers:journaled"


pytestmark = pytest.mark.fast("poison")


def cli_json(settings: Settings, *args: str) -> Any:
    done = cli(settings, *args, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return msgspec.json.decode(done.stdout)


def dead_letters_counted(body: str) -> float:
    for line in body.splitlines():
        if line.startswith("awooop_dead_letters_total "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"awooop_dead_letters_total not on the page:\n{body[:3000]}")


def open_dead_letters(body: str, project: str) -> float | None:
    """The DeadLetters alert's gauge for ``project`` (None: no series)."""
    for line in body.splitlines():
        if line.startswith(f'awooop_dead_letters_open{{project_id="{project}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


async def lose_redis(settings: Settings) -> None:
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        pattern = f"{settings.redis_key_prefix}:*"
        doomed = [k async for k in client.scan_iter(match=pattern, count=1000)]
        assert doomed  # the streams the relay made
        await client.delete(*doomed)
    finally:
        await client.aclose()


async def status_is(db: Database, run_id: uuid.UUID, status: str) -> bool:
    return (await load(db, P, run_id)).status == status


@pytest.mark.long
@pytest.mark.connections(23)
async def test_a_handler_that_kills_its_worker_every_time_is_failed_dead_lettered_and_redriven(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    effects = str(tmp_path / "effects.jsonl")
    env = {"AWOOOP_TEST_SIDE_EFFECTS": effects}
    port = free_port()
    # The relay and the reaper in their own process, as `awooop loops run` in ops/compose.yaml.
    loops = WorkerProcess(
        fast,
        tmp_path,
        "loops",
        command=("loops", "run", "relay", "run-reaper", "stats_runs"),
        env={"AWOOOP_METRICS_PORT": str(port)},
    ).start()
    fixed: WorkerProcess | None = None
    try:
        [run_id] = await create_runs(db, P, max_attempts=3, payload={})
        dead: list[tuple[str, int]] = []  # (worker id, pid) of each worker the handler killed
        for n in range(1, 4):
            proc = WorkerProcess(fast, tmp_path, f"poison{n}", handler=POISON, env=env).start()
            worker_id = proc.worker_id()
            # It takes the run (stream, reclaim or poll, once the last lease expired) and dies.
            assert proc.wait(within_s=60) == 1, proc.logs()[-3000:]
            dead.append((worker_id, proc.pid))
        await eventually(
            lambda: status_is(db, run_id, "FAILED"), timeout_s=30, what="the run FAILED"
        )

        exits = [e for e in read_effects(effects) if e["run_id"] == str(run_id)]
        assert [(e["attempt"], e["worker_id"], e["pid"]) for e in exits] == [
            (n, worker_id, pid) for n, (worker_id, pid) in enumerate(dead, start=1)
        ]
        state = await load(db, P, run_id)
        last_worker = dead[-1][0]
        assert (state.failure_code, state.attempt_count) == ("E-RUN-004", 3)
        assert state.failure_reason is not None
        assert state.failure_reason.startswith("Max retry attempts exceeded (3 of 3): ")
        assert (
            f"the lease of attempt 3 expired: worker {last_worker} neither renewed it"
            in state.failure_reason
        )

        # `runs show`: every attempt ended with its worker's lease expiring, and says so.
        shown = cli_json(fast, "runs", "show", P, str(run_id))
        assert shown["state"]["failure_reason"] == state.failure_reason
        ends = [
            (line["event_type"], line["attempt"], line["worker_id"])
            for line in shown["timeline"]
            if line["event_type"] in ("RunRequeued", "RunFailed")
        ]
        assert ends == [
            ("RunRequeued", 1, dead[0][0]),
            ("RunRequeued", 2, dead[1][0]),
            ("RunFailed", 3, last_worker),
        ]
        for line in shown["timeline"]:
            if line["event_type"] == "RunRequeued":
                assert "neither renewed it" in line["detail"]["reason"]

        # One dead letter, recorded with the reaper's failure, counted in the loops process.
        async def one_dead_letter() -> bool:
            return len(cli_json(fast, "deadletters", "list")) >= 1

        await eventually(one_dead_letter, timeout_s=30, what="the dead letter")
        [entry] = cli_json(fast, "deadletters", "list")
        assert (entry["run_id"], entry["project_id"], entry["event_type"]) == (
            str(run_id),
            P,
            "RunFailed",
        )
        assert (entry["group"], entry["reason"]) == ("", state.failure_reason)
        async with httpx.AsyncClient(timeout=10) as client:
            page = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
        assert dead_letters_counted(page) == 1.0

        # Redis restarts without persistence: everything of this test's prefix is gone.
        await lose_redis(fast)
        assert cli_json(fast, "deadletters", "list") == [entry]

        async def gauge_says(value: float | None) -> bool:
            async with httpx.AsyncClient(timeout=10) as client:
                page = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            return open_dead_letters(page, P) == value

        await eventually(lambda: gauge_says(1.0), timeout_s=30, what="the alert's gauge at 1")

        # Fixed: re-drive the entry and let a worker with a working handler take the run.
        [result] = cli_json(fast, "deadletters", "redrive", entry["id"])
        assert (result["outcome"], result["run_id"]) == ("retried", str(run_id))
        assert cli_json(fast, "deadletters", "list") == []
        fixed = WorkerProcess(fast, tmp_path, "fixed", handler=FIXED, env=env).start()
        fixed_id = fixed.worker_id()
        await eventually(
            lambda: status_is(db, run_id, "COMPLETED"), timeout_s=30, what="the run COMPLETED"
        )
        done = await load(db, P, run_id)
        assert (done.attempt_count, done.failure_reason, done.result) == (
            4,
            None,
            {"one": 41, "two": 42},
        )
        assert [e["worker_id"] for e in read_effects(effects) if e["what"] == "done"] == [fixed_id]
        assert cli_json(fast, "deadletters", "list") == []
        await eventually(lambda: gauge_says(None), timeout_s=30, what="the alert's gauge cleared")
    finally:
        if fixed is not None:
            fixed.stop()
        loops.stop()
