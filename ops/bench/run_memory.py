"""What each run in flight holds in a worker: an in-process worker, tracemalloc and gc counts.

    .venv/bin/python ops/bench/run_memory.py [--runs 1000] [--delay-ms 30000] [--top 25]

One worker in this process (polling, no stream intake), the local model with ``--delay-ms`` per
call, the handler ``worker_handlers:agent_llm_steps`` (``run.llm_step`` calls), on a scratch
database (:mod:`scratch`) and Redis key prefix. After a warm-up (runs of no step), a snapshot;
then ``--runs`` runs are submitted, and when every one of them is in flight and inside its
model call, a second snapshot. Prints one JSON document (kept in ``results/``): the Python heap
per run in flight (tracemalloc's traced bytes), the ``--top`` allocation sites by bytes per
run (file:line, their size and count per run), by file, and the objects per run by type (gc).
The process's RSS per run in flight is there too, but the benchmark that measures it on real
processes is ``agents.py`` (``rss_kb_per_in_flight``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from scratch import REDIS, report, url_for  # noqa: E402
from worker_handlers import agent_llm_steps  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.logs import configure_logging  # noqa: E402
from awooop.core.migrate import migrate  # noqa: E402
from awooop.producer import ChannelEvent, submit_many  # noqa: E402
from awooop.services import Services  # noqa: E402
from awooop.worker.assembly import build_worker, worker_process  # noqa: E402

PROJECT = "bench"


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def types() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__qualname__ for o in gc.get_objects())


async def submit(db: Any, count: int, steps: int, settings: Any) -> None:
    for start in range(0, count, 500):
        events = [
            ChannelEvent("api", uuid.uuid4().hex, {"steps": steps})
            for _ in range(min(500, count - start))
        ]
        await submit_many(db, PROJECT, events, settings=settings)


async def until(check: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        await asyncio.sleep(0.05)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    name = f"awooop_bench_mem_{uuid.uuid4().hex[:8]}"
    url = url_for(name)
    await migrate(url)
    settings = load_settings(
        environ={},
        database_url=url,
        redis_url=REDIS,
        redis_key_prefix=f"mem{uuid.uuid4().hex[:8]}",
        llm_url=f"local:?delay_ms={args.delay_ms}",
        log_level="warning",
    )
    services = await Services.open(settings, db_pool_size=10)
    stop = asyncio.Event()
    try:
        async with worker_process(services) as gateway:
            parts = build_worker(
                db=services.db,
                settings=settings,
                handler=agent_llm_steps,
                concurrency=args.runs,
                llm=gateway,
                streams=False,
            )
            worker = parts.worker
            task = asyncio.create_task(parts.run(stop))
            await submit(services.db, args.warmup, 0, settings)
            await until(lambda: sum(worker.executor.finished.values()) >= args.warmup, 120)
            await asyncio.sleep(1)
            if args.frames:
                tracemalloc.start(args.frames)
            before_types, before_rss = types(), rss_kb()
            first = tracemalloc.take_snapshot() if args.frames else None
            await submit(services.db, args.runs, 3, settings)

            def in_calls() -> bool:
                held = list(worker.executor.attempts.values())
                return len(held) >= args.runs and all(a.step is not None for a in held)

            await until(in_calls, args.delay_ms / 1000 * 0.8)
            await asyncio.sleep(0.5)
            after_types, after_rss = types(), rss_kb()
            second = tracemalloc.take_snapshot() if args.frames else None
            held = len(worker.executor.attempts)
            stop.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        tracemalloc.stop()
        await services.close()
        await drop(name)
    return figures(args, held, first, second, before_types, after_types, after_rss - before_rss)


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
) -> dict[str, Any]:
    n = max(1, held)
    grown = (after_types - before_types).most_common(args.top)
    result: dict[str, Any] = {
        "benchmark": "run_memory",
        "runs_in_flight": held,
        "delay_ms": args.delay_ms,
        "rss_kb_per_run": round(rss_delta_kb / n, 2),
        "objects_per_run": {t: round(c / n, 2) for t, c in grown},
    }
    if first is None or second is None:
        return result
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    first, second = first.filter_traces(skip), second.filter_traces(skip)
    lines = second.compare_to(first, "lineno")
    files = second.compare_to(first, "filename")
    return result | {
        "python_heap_bytes_per_run": round(sum(s.size_diff for s in lines) / n),
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
    args = parser.parse_args()
    configure_logging("warning")
    report(asyncio.run(measure(args)), "run_memory")


if __name__ == "__main__":
    main()
