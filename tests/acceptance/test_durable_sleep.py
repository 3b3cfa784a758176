"""Durable sleep with worker processes (the real CLI): a short sleep wakes by notification, not
at the poll fallback; sleeping runs hold no slot; a kill -9 of the worker (and its timers loop)
and a Redis FLUSHALL during the sleeps change nothing (docs/workers.md, Durable sleep)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import msgspec
import pytest
import redis.asyncio as aioredis

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from tests.support.handlers import read_effects
from tests.support.runs import (
    all_finished,
    count_events,
    create_runs,
    events_of,
    load,
    statuses,
)
from tests.support.services import private_redis
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, cli, relay_process, workers

P = "proj-sleep"
SLEEPER = "tests.support.durable_handlers:sleeper"

pytestmark = pytest.mark.fast("processes")


def no_poll(settings: Settings) -> Settings:
    """Every fallback poll 60 s away: only notifications can wake a sleeping run in time."""
    return msgspec.structs.replace(settings, timer_poll_interval_s=60.0, poll_interval_s=60.0)


async def sleeping(db: Database, count: int) -> bool:
    return (await statuses(db)).get("WAITING_EVENT", 0) == count


@pytest.mark.connections(25)
async def test_a_two_second_sleep_is_woken_by_its_timer_not_the_poll(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    effects = str(tmp_path / "effects.jsonl")
    with workers(
        no_poll(fast),
        tmp_path,
        1,
        handler=SLEEPER,
        args=("--with-loops",),
        env={"AWOOOP_TEST_SIDE_EFFECTS": effects},
    ) as procs:
        procs[0].worker_id()
        started = time.monotonic()
        [run_id] = await create_runs(db, P, payload={"sleep_s": 2})
        await eventually(lambda: all_finished(db, [run_id]), timeout_s=30, what="the sleep ended")
        took = time.monotonic() - started
    history = await events_of(db, P, run_id)
    types = [type(e).__name__ for e in history]
    assert types[-1] == "RunCompleted", types
    assert types.count("WaitStarted") == 1 and types.count("TimerFired") == 1
    [wait] = [e for e in history if type(e).__name__ == "WaitStarted"]
    [fired] = [e for e in history if type(e).__name__ == "TimerFired"]
    assert (wait.due_at - wait.at).total_seconds() == pytest.approx(2.0, abs=0.01)
    assert fired.at >= wait.due_at  # never early
    assert 2.0 <= took < 30  # a poll fallback of 60 s was not what woke it
    steps = Counter(e["what"] for e in read_effects(effects))
    assert steps == {"before": 1, "after": 1}  # the first step was not run again
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM awooop_run_waits") == 0


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    """Pure: the most of the ``(start, end)`` spans that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in edges:  # an end sorts before a start at the same moment
        now += step
        most = max(most, now)
    return most


@pytest.mark.long(15)
@pytest.mark.connections(25)
async def test_sleeping_runs_hold_no_slot(db: Database, fast: Settings, tmp_path: Path) -> None:
    """200 runs each sleeping 3 s on one worker of concurrency 10: the event log shows more of
    them asleep at once than the worker has slots, which only runs that hold no slot while they
    sleep can do; each sleep fired once and every run completed once."""
    run_ids = await create_runs(db, P, 200, payload={"sleep_s": 3})
    with workers(
        fast,
        tmp_path,
        1,
        handler=SLEEPER,
        args=("--with-loops", "--concurrency", "10"),
        env={"AWOOOP_LOG_LEVEL": "warning"},
    ) as procs:
        procs[0].worker_id()
        await eventually(lambda: all_finished(db, run_ids), timeout_s=180, what="200 sleeps")
    assert await statuses(db) == Counter({"COMPLETED": 200})
    fired = await count_events(db, "TimerFired")
    assert sorted(fired[run_stream_id(r)] for r in run_ids) == [1] * 200
    asleep: list[tuple[datetime, datetime]] = []
    for run_id in run_ids:
        history = {type(e).__name__: e for e in await events_of(db, P, run_id)}
        asleep.append((history["WaitStarted"].at, history["TimerFired"].at))
    assert most_at_once(asleep) > 10, sorted(asleep)[:20]


@pytest.mark.long(20)
@pytest.mark.connections(27)
async def test_kill_9_and_flushall_during_the_sleeps_change_nothing(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    effects = str(tmp_path / "effects.jsonl")
    runs = 40
    with private_redis() as rd:
        settings = msgspec.structs.replace(fast, redis_url=rd.url)
        # 8 s sleeps: on a loaded machine the last run may begin its sleep seconds after the
        # first; most still sleep when the worker is killed.
        run_ids = await create_runs(db, P, runs, payload={"sleep_s": 8})
        relay = relay_process(settings, tmp_path).start()
        env = {"AWOOOP_TEST_SIDE_EFFECTS": effects, "AWOOOP_LOG_LEVEL": "warning"}
        first = WorkerProcess(
            settings, tmp_path, "w0", handler=SLEEPER, args=("--with-loops",), env=env
        ).start()
        second: WorkerProcess | None = None
        try:
            first.worker_id()

            async def all_slept() -> bool:  # each run began its sleep (some may have woken)
                began = await count_events(db, "WaitStarted")
                return sum(began[run_stream_id(r)] for r in run_ids) == runs

            await eventually(all_slept, timeout_s=60, what="every run began its sleep")
            os.kill(first.pid, signal.SIGKILL)  # the worker and its timers loop
            first.wait()
            asleep = (await statuses(db)).get("WAITING_EVENT", 0)
            assert asleep > 0  # the kill and the wipe came while runs slept
            client = aioredis.Redis.from_url(rd.url)
            try:
                await client.flushall()
            finally:
                await client.aclose()
            second = WorkerProcess(
                settings, tmp_path, "w1", handler=SLEEPER, args=("--with-loops",), env=env
            ).start()
            second.worker_id()
            await eventually(lambda: all_finished(db, run_ids), timeout_s=60, what="every run")
        finally:
            for proc in (first, second, relay):
                if proc is not None:
                    proc.stop()
    assert await statuses(db) == Counter({"COMPLETED": runs})
    for event_type in ("WaitStarted", "TimerFired", "RunCompleted"):
        found = await count_events(db, event_type)
        assert sorted(found[run_stream_id(r)] for r in run_ids) == [1] * runs, event_type
    steps = Counter((e["run_id"], e["what"]) for e in read_effects(effects))
    assert set(steps.values()) == {1} and len(steps) == 2 * runs  # each step once per run


@pytest.mark.connections(28)
async def test_a_handler_gets_a_signal_or_its_timeout(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    """Worker processes: one run's wait is answered by `awooop runs signal`, the other's times
    out (the handler catches E-SIGNAL-001); each step runs once."""
    effects = str(tmp_path / "effects.jsonl")
    with workers(
        fast,
        tmp_path,
        1,
        handler=SLEEPER,
        args=("--with-loops",),
        env={"AWOOOP_TEST_SIDE_EFFECTS": effects},
    ) as procs:
        procs[0].worker_id()
        [answered] = await create_runs(db, P, payload={"event": "paid", "timeout_s": 60})
        [timed_out] = await create_runs(db, P, payload={"event": "paid", "timeout_s": 1})
        await eventually(lambda: sleeping(db, 2), timeout_s=30, what="both runs wait")
        done = cli(fast, "runs", "signal", P, str(answered), "paid", "--payload", '{"a": 1}',
                   "--key", "k1")  # fmt: skip
        assert done.returncode == 0, done.stderr
        await eventually(
            lambda: all_finished(db, [answered, timed_out]), timeout_s=30, what="both ended"
        )
    assert (await load(db, P, answered)).result == {"before": "before", "after": "after",
                                                     "got": {"a": 1}}  # fmt: skip
    assert (await load(db, P, timed_out)).result["got"] == "timeout"
    steps = Counter((e["run_id"], e["what"]) for e in read_effects(effects))
    assert set(steps.values()) == {1} and len(steps) == 4
