"""What each run in flight holds in a worker: an in-process worker, tracemalloc and gc counts.

    .venv/bin/python ops/bench/run_memory.py [--runs 1000] [--delay-ms 30000] [--top 25]
                                             [--frames 1] [--streams] [--to-end]
                                             [--at-peak] [--concurrency N]

One worker in this process, set up as ``awooop worker`` sets up its own (the uvloop event loop,
tracing configured from ``OTEL_*``, the heap settled after start), the local model with
``--delay-ms`` per call, the handler ``worker_handlers:agent_llm_steps`` (``run.llm_step``
calls), on a scratch database (:mod:`scratch`) and Redis key prefix. Without ``--streams`` the
worker polls; with it, an ``awooop relay`` process announces the runs and the worker takes
them from the work stream (the agents benchmark's path). After a warm-up (runs of one step),
a snapshot; then ``--runs`` runs are submitted by a child process in one transaction (its
allocations are not this process's), and when every one of them is in flight and inside its
model call (``--concurrency``: that many of them, the worker's concurrency), a second
snapshot. ``--to-end``: then wait until every run has completed (the
peak figures then cover the runs' ends too).

Prints one JSON document (kept in ``results/``): the Python heap per run in flight
(tracemalloc's traced bytes) and its peak since the submission, the ``--top`` allocation
sites by bytes per run (file:line, their size and count per run), by file, and with
``--frames N`` by stack, and the objects per run by type (gc); with ``--at-peak``, the sites
and stacks are those of the snapshot taken at the most traced memory seen (a thread samples it
every 20 ms), not in the calls. With ``--frames 0`` (no
tracemalloc, whose own records weigh on the RSS): the process's RSS per run in flight, now
and at its peak since the submission (VmHWM, as ``agents.py`` measures
``rss_kb_per_in_flight`` on real processes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path
from types import CoroutineType, MethodType
from typing import Any

import uvloop

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from scratch import REDIS, report, url_for  # noqa: E402
from worker import Processes, process_env  # noqa: E402
from worker_handlers import agent_llm_steps  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.logs import configure_logging  # noqa: E402
from awooop.core.migrate import migrate  # noqa: E402
from awooop.core.process import settle_heap  # noqa: E402
from awooop.core.telemetry import configure_tracing  # noqa: E402
from awooop.producer import ChannelEvent, submit_many  # noqa: E402
from awooop.services import Services  # noqa: E402
from awooop.worker.assembly import build_worker, worker_process  # noqa: E402

PROJECT = "bench"


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM back to the current RSS


class PeakSnapshots:
    """A thread that keeps the snapshot taken at the most traced memory seen (every 20 ms)."""

    def __init__(self) -> None:
        self.best = 0
        self.snapshot: tracemalloc.Snapshot | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while not self.stop.wait(0.02):
            now = tracemalloc.get_traced_memory()[0]
            if now > self.best * 1.01:
                self.snapshot, self.best = tracemalloc.take_snapshot(), now


def kind(o: object) -> str:
    """An object's type; a bound method by its function (``method:Class.name``), a coroutine
    by its own (``coroutine:name``), a task by its coroutine's (``Task:name``)."""
    if isinstance(o, MethodType):
        return f"method:{o.__func__.__qualname__}"
    if isinstance(o, CoroutineType):
        return f"coroutine:{o.__qualname__}"
    if isinstance(o, asyncio.Task):
        return f"Task:{getattr(o.get_coro(), '__qualname__', '?')}"
    return type(o).__qualname__


def types() -> Counter[str]:
    """Objects by :func:`kind`."""
    gc.collect()
    return Counter(kind(o) for o in gc.get_objects())


async def submit(url: str, count: int, steps: int) -> None:
    """``count`` runs of ``steps`` steps in one transaction (the child process's work)."""
    import asyncpg

    from awooop.producer import set_tenant

    settings = load_settings(environ={}, database_url=url, redis_url=REDIS)
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await set_tenant(conn, PROJECT)
            for start in range(0, count, 500):
                events = [
                    ChannelEvent("api", uuid.uuid4().hex, {"steps": steps})
                    for _ in range(min(500, count - start))
                ]
                await submit_many(conn, PROJECT, events, settings=settings)
    finally:
        await conn.close()


def submit_apart(url: str, count: int, steps: int) -> None:
    argv = [sys.executable, __file__, "--submit", url, "--runs", str(count), "--steps", str(steps)]
    subprocess.run(argv, check=True)


async def until(check: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        await asyncio.sleep(0.05)


async def measure(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    name = f"awooop_bench_mem_{uuid.uuid4().hex[:8]}"
    url = url_for(name)
    await migrate(url)
    prefix = f"mem{uuid.uuid4().hex[:8]}"
    llm_url = f"local:?delay_ms={args.delay_ms}"
    settings = load_settings(
        environ={},
        database_url=url,
        redis_url=REDIS,
        redis_key_prefix=prefix,
        llm_url=llm_url,
        log_level="warning",
    )
    relay = Processes(logs)
    if args.streams:
        relay.start("relay", ["relay"], process_env(url, REDIS, prefix, HERE.parents[1]))
    configure_tracing("awooop-worker")
    services = await Services.open(settings, db_pool_size=10, db_run_min=2)
    stop = asyncio.Event()
    try:
        async with worker_process(services) as gateway:
            parts = build_worker(
                db=services.db,
                settings=settings,
                handler=agent_llm_steps,
                concurrency=args.concurrency or args.runs,
                llm=gateway,
                redis=services.redis if args.streams else None,
                keys=services.keys,
                streams=args.streams,
            )
            worker = parts.worker
            task = asyncio.create_task(parts.run(stop))
            settle_heap()
            done = worker.executor.finished
            await asyncio.to_thread(submit_apart, url, args.warmup, 1)
            await until(lambda: sum(done.values()) >= args.warmup, 120)
            await asyncio.sleep(1)
            if args.frames:
                tracemalloc.start(args.frames)
            before_types, before_rss = types(), status_kb("VmRSS")
            first = tracemalloc.take_snapshot() if args.frames else None
            base_heap = tracemalloc.get_traced_memory()[0] if args.frames else 0
            reset_peak()
            tracemalloc.reset_peak()
            peak = PeakSnapshots()
            if args.frames and args.at_peak:
                peak.thread.start()
            await asyncio.to_thread(submit_apart, url, args.runs, 3)

            def in_calls() -> bool:
                held = list(worker.executor.attempts.values())
                full = args.concurrency or args.runs
                return len(held) >= full and all(a.step is not None for a in held)

            await until(in_calls, args.delay_ms / 1000 * 0.8)
            await asyncio.sleep(0.5)
            held = len(worker.executor.attempts)
            rss = status_kb("VmRSS")
            second = tracemalloc.take_snapshot() if args.frames else None
            after_types = types()
            if args.to_end:
                await until(lambda: sum(done.values()) >= args.warmup + args.runs, 600)
            peak.stop.set()
            if peak.snapshot is not None:  # --at-peak: the sites at the peak, not in the calls
                second = peak.snapshot
            peaks: dict[str, Any] = {
                "rss_kb": status_kb("VmHWM") - before_rss,
                "heap_bytes": tracemalloc.get_traced_memory()[1] - base_heap if args.frames else 0,
            }
            if args.to_end:  # what the ended runs left behind (a leak grows with the runs)
                await asyncio.sleep(1)
                left = types() - before_types
                peaks["left_objects"] = sum(left.values())
                peaks["left_heap_bytes"] = (
                    tracemalloc.get_traced_memory()[0] - base_heap if args.frames else 0
                )
                peaks["left_types"] = dict(left.most_common(10))
            stop.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        tracemalloc.stop()
        await services.close()
        relay.stop_all()
        await drop(name)
    return figures(args, held, first, second, before_types, after_types, rss - before_rss, peaks)


async def drop(name: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(url_for("postgres"))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def figures(
    args: argparse.Namespace,
    held: int,
    first: tracemalloc.Snapshot | None,
    second: tracemalloc.Snapshot | None,
    before_types: Counter[str],
    after_types: Counter[str],
    rss_delta_kb: int,
    peaks: dict[str, Any],
) -> dict[str, Any]:
    n = max(1, held)
    grown = (after_types - before_types).most_common(args.top)
    result: dict[str, Any] = {
        "benchmark": "run_memory",
        "command": " ".join(["ops/bench/run_memory.py", *sys.argv[1:]]),
        "runs_in_flight": held,
        "delay_ms": args.delay_ms,
        "streams": args.streams,
        "to_end": args.to_end,
        "objects_per_run": {t: round(c / n, 2) for t, c in grown},
    }
    if args.to_end:
        result["left_after_end_per_run"] = {
            "objects": round(peaks["left_objects"] / args.runs, 3),
            "heap_bytes": round(peaks["left_heap_bytes"] / args.runs, 1),
            "types": peaks["left_types"],
        }
    if first is None or second is None:
        return result | {
            "rss_kb_per_run": round(rss_delta_kb / n, 2),
            "peak_rss_kb_per_run": round(peaks["rss_kb"] / n, 2),
        }
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    first, second = first.filter_traces(skip), second.filter_traces(skip)
    lines = second.compare_to(first, "lineno")
    files = second.compare_to(first, "filename")
    return result | {
        "python_heap_bytes_per_run": round(sum(s.size_diff for s in lines) / n),
        "peak_python_heap_bytes_per_run": round(peaks["heap_bytes"] / n),
        "sites": [
            {
                "at": f"{s.traceback[0].filename.split('site-packages/')[-1]}:"
                f"{s.traceback[0].lineno}",
                "bytes_per_run": round(s.size_diff / n, 1),
                "blocks_per_run": round(s.count_diff / n, 2),
            }
            for s in lines[: args.top]
        ],
        "files": [
            {"file": s.traceback[0].filename, "bytes_per_run": round(s.size_diff / n, 1)}
            for s in files[: args.top]
        ],
        "stacks": [
            {
                "bytes_per_run": round(s.size_diff / n, 1),
                "blocks_per_run": round(s.count_diff / n, 2),
                "frames": [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in s.traceback],
            }
            for s in second.compare_to(first, "traceback")[: args.top]
        ]
        if args.frames > 1
        else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs in flight")
    parser.add_argument("--delay-ms", type=int, default=30000, help="the model call's time")
    parser.add_argument("--warmup", type=int, default=20, help="runs of no step first")
    parser.add_argument(
        "--frames", type=int, default=1, help="tracemalloc frames kept (0: RSS and types only)"
    )
    parser.add_argument("--top", type=int, default=25, help="sites and types listed")
    parser.add_argument("--streams", action="store_true", help="the work stream, a relay")
    parser.add_argument("--to-end", action="store_true", help="peaks until the runs complete")
    parser.add_argument(
        "--concurrency", type=int, default=0, help="runs in flight at most (default: --runs)"
    )
    parser.add_argument("--at-peak", action="store_true", help="sites at the heap's peak")
    parser.add_argument("--submit", default=None, help=argparse.SUPPRESS)  # the child's URL
    parser.add_argument("--steps", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.submit:
        asyncio.run(submit(args.submit, args.runs, args.steps))
        return
    configure_logging("warning")
    with tempfile.TemporaryDirectory() as logs:
        result = uvloop.run(measure(args, Path(logs)))
    report(result, "run_memory")


if __name__ == "__main__":
    main()
