"""Benchmark: ``replay run_state`` over a large log: events/s and peak memory at two sizes.

    .venv/bin/python ops/bench/replay.py [--sizes 250000,1000000] [--projects 20] [--workers 2]

For each size it creates a scratch database on AWOOOP_BENCH_PG_URL (default: the local
server), migrates it, bulk-loads valid run histories straight into awooop_events and
awooop_event_streams with COPY (the write path would take hours for a million events), then,
each in a fresh process so that peak RSS belongs to the replay alone:

- ``swap``: replay run_state --swap into the empty live table (bulk pass, indexes, swap);
- ``verify``: replay run_state --verify against the now populated live table;
- ``verify_parallel``: the same with ``--workers`` bulk worker processes (default 2).

It prints one JSON object: per size, the bulk pass's events/s, each phase's seconds, and the
peak RSS of each replay process (``ru_maxrss``); ``memory_ratio`` compares the largest size's
peak with the smallest's (flat memory: close to 1 while the log grows 4x). Scratch databases
are dropped at the end, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from awooop.core import events as ev
from awooop.core.logs import configure_logging
from awooop.core.migrate import migrate
from awooop.core.pools import connect
from awooop.projections.bulk import use_binary_json
from awooop.projections.registry import get
from awooop.projections.replay import Replay

SERVER = os.environ.get("AWOOOP_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
EVENT_COLUMNS = ("event_id", "stream_id", "version", "project_id", "event_type", "data", "metadata")
CONCURRENT_RUNS = 2000  # runs whose events interleave in the log, as with real traffic
STREAMS = """
INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
SELECT stream_id, min(project_id), max(version), pg_current_xact_id()
FROM awooop_events GROUP BY stream_id
"""


def url_for(name: str) -> str:
    return SERVER.rsplit("/", 1)[0] + "/" + name


# --- valid run histories -------------------------------------------------------------------


def history(rng: random.Random, run_id: uuid.UUID, project: str, t0: datetime) -> list[Any]:
    """One run's events: a legal path through the state machine, chosen at random."""
    clock = iter(t0 + timedelta(milliseconds=i) for i in range(1000))
    worker = f"w-{rng.randrange(50)}"

    def at() -> datetime:
        return next(clock)

    def claim(attempt: int) -> ev.RunClaimed:
        now = at()
        return ev.RunClaimed(
            at=now, worker_id=worker, attempt=attempt, lease_until=now + timedelta(seconds=30)
        )

    def steps(attempt: int, n: int) -> list[Any]:
        return [
            ev.StepCompleted(at=at(), worker_id=worker, attempt=attempt, step=f"s{i}", result=i)
            for i in range(n)
        ]

    out: list[Any] = [
        ev.RunCreated(
            at=at(),
            run_id=run_id,
            project_id=project,
            channel_type="api",
            provider_event_id=str(run_id),
            input={"text": "hello", "n": rng.randrange(1000)},
            max_attempts=3,
        )
    ]
    kind = rng.randrange(6)
    if kind == 0:
        out += [claim(1), *steps(1, rng.randrange(1, 5))]
        out.append(ev.RunCompleted(at=at(), worker_id=worker, attempt=1, result={"ok": True}))
    elif kind == 1:
        out += [claim(1), ev.ToolWaitStarted(at=at(), worker_id=worker, attempt=1, tool="search")]
        out += [ev.ToolResultReceived(at=at(), worker_id=worker, attempt=1, tool="search")]
        out += [*steps(1, 1), ev.RunCompleted(at=at(), worker_id=worker, attempt=1)]
    elif kind == 2:
        now = at()
        out += [
            claim(1),
            ev.ApprovalRequested(
                at=now, worker_id=worker, attempt=1, expires_at=now + timedelta(minutes=15)
            ),
            ev.ApprovalGranted(at=at(), actor="alice"),
            claim(2),
            ev.RunCompleted(at=at(), worker_id=worker, attempt=2),
        ]
    elif kind == 3:
        out += [claim(1), *steps(1, 2), ev.RunRequeued(at=at(), attempt=1), claim(2)]
        out.append(ev.RunFailed(at=at(), reason="boom", code="E-X", worker_id=worker, attempt=2))
    elif kind == 4:
        out.append(ev.RunCancelled(at=at(), actor="ops"))
    else:
        out += [claim(1), *steps(1, rng.randrange(0, 3))]  # still running
    return out


def event_rows(total: int, projects: int, seed: int = 1) -> Iterator[tuple[Any, ...]]:
    """About ``total`` events of valid runs, interleaved across CONCURRENT_RUNS at a time."""
    rng = random.Random(seed)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    produced = 0
    while produced < total:
        active = []
        for _ in range(CONCURRENT_RUNS):
            run_id = uuid.uuid4()
            project = f"bench-{rng.randrange(projects)}"
            active.append((run_id, project, history(rng, run_id, project, t0)))
        t0 += timedelta(minutes=1)
        cursors = [0] * len(active)
        while active and produced < total:
            i = rng.randrange(len(active))
            run_id, project, events = active[i]
            version = cursors[i]
            event = events[version]
            yield (
                uuid.uuid4(),
                ev.run_stream_id(run_id),
                version + 1,
                project,
                type(event).__name__,
                event,
                {"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"},
            )
            produced += 1
            cursors[i] += 1
            if cursors[i] == len(events):
                active[i], cursors[i] = active[-1], cursors[-1]
                active.pop()
                cursors.pop()


async def load(url: str, total: int, projects: int) -> dict[str, Any]:
    conn = await connect(url)
    await use_binary_json(conn)
    started = time.perf_counter()
    try:
        rows = event_rows(total, projects)
        while True:
            chunk = [row for _, row in zip(range(50_000), rows, strict=False)]
            if not chunk:
                break
            await conn.copy_records_to_table("awooop_events", records=chunk, columns=EVENT_COLUMNS)
        # A run cut off by the size limit keeps its prefix: still a valid history.
        await conn.execute(STREAMS)
        await conn.execute("ANALYZE awooop_events")
        events = await conn.fetchval("SELECT count(*) FROM awooop_events")
        runs = await conn.fetchval("SELECT count(*) FROM awooop_event_streams")
    finally:
        await conn.close()
    return {"events": events, "runs": runs, "load_s": round(time.perf_counter() - started, 1)}


# --- one replay, in its own process ---------------------------------------------------------


def peak_rss_kb() -> int:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries the parent's
    peak over fork and exec into it, so a child started by a big loader would report that."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def replay_once(url: str, mode: str, workers: int) -> dict[str, Any]:
    before = peak_rss_kb()  # the interpreter and its imports
    started = time.perf_counter()
    report = await Replay(url, get("run_state"), progress_stream=sys.stderr, workers=workers).run(
        verify=mode == "verify", swap=mode == "swap"
    )
    total = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "mode": mode,
        "workers": workers,
        "events": report.bulk_events + report.tail_events + report.lock_events,
        "bulk_events_per_s": round(report.events_per_s),
        "bulk_s": round(report.bulk_seconds, 2),
        "total_s": round(total, 2),
        "events_per_s_overall": round(report.bulk_events / total),
        "differences": report.differences,
        "peak_rss_mb": round(peak_rss_kb() / 1024, 1),
        "rss_before_replay_mb": round(before / 1024, 1),
        # bulk worker processes (spawned fresh: their peak is their own)
        "workers_peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        )
        if workers > 1
        else None,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
    }


def child(url: str, mode: str, workers: int = 1) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--url", url, "--workers", str(workers)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"replay {mode} failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


async def bench_size(size: int, projects: int, workers: int) -> dict[str, Any]:
    name = f"awooop_bench_replay_{uuid.uuid4().hex[:8]}"
    url = url_for(name)
    try:
        await migrate(url)
        result: dict[str, Any] = {"size": size, **await load(url, size, projects)}
        result["swap"] = child(url, "swap")
        result["verify"] = child(url, "verify")
        if workers > 1:
            result["verify_parallel"] = child(url, "verify", workers)
        return result
    finally:
        admin = await asyncpg.connect(url_for("postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def main(sizes: list[int], projects: int, workers: int) -> dict[str, Any]:
    results = [await bench_size(size, projects, workers) for size in sizes]
    peaks = [max(r["swap"]["peak_rss_mb"], r["verify"]["peak_rss_mb"]) for r in results]
    return {
        "benchmark": "replay run_state",
        "target_events_per_s": 100_000,
        "cpus": os.cpu_count(),
        "sizes": results,
        "memory_ratio": round(peaks[-1] / peaks[0], 2),
        "events_ratio": round(results[-1]["events"] / results[0]["events"], 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250000,1000000")
    parser.add_argument("--projects", type=int, default=20)
    parser.add_argument(
        "--workers", type=int, default=2, help="bulk workers of the parallel verify run"
    )
    parser.add_argument("--child", choices=("swap", "verify"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure_logging("warning")
    if args.child:
        print(json.dumps(asyncio.run(replay_once(args.url, args.child, args.workers))))
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        print(json.dumps(asyncio.run(main(sizes, args.projects, args.workers)), indent=2))
