"""Benchmark: what running suspects alone costs after a worker dies holding many runs.

    .venv/bin/python ops/bench/isolation.py [--runs 10,50] [--out FILE]

Real ``awooop relay`` and ``awooop worker`` processes on a scratch database (``worker.py``'s
Scratch). For each N: a victim worker (concurrency N) takes N runs whose first attempt hangs,
a survivor worker (concurrency N) starts, the victim is killed (SIGKILL). Its N runs come back
as suspects (uncharged: it held several) and the survivor runs them one at a time, each with
nothing else in flight; later attempts of the handler return at once, so the time between the
first and the last completion is what isolation adds per run (claim, run, completion, one
after another, instead of together). Short leases (``AWOOOP_LEASE_TTL_S`` 2 s, heartbeat
0.5 s, reclaim and polling every 1 s), so the recovery before the first completion is short
too; every run's ``attempt_count`` / ``max_attempts`` is checked (2 of 4: nothing charged).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

from worker import HANDLERS, Processes, Scratch, ingest_batch, wait_count  # noqa: E402

from awooop.core.db import Database  # noqa: E402 - after the sys.path line, for a plain script

SETTINGS = {
    "lease_ttl_s": "2",
    "heartbeat_interval_s": "0.5",
    "reclaim_interval_s": "1",
    "poll_interval_s": "1",
    "shutdown_grace_s": "0.5",
}

FINISHES = """
SELECT extract(epoch FROM min(finished_at)) AS first, extract(epoch FROM max(finished_at)) AS last,
       count(*) FILTER (WHERE attempt_count = 2 AND max_attempts = 4) AS uncharged,
       count(*) FILTER (WHERE suspect_worker_id IS NOT NULL) AS suspects,
       count(*) AS runs
FROM awooop_run_state WHERE status = 'COMPLETED'
"""


async def one(count: int, tmp: Path) -> dict[str, Any]:
    async with Scratch() as scratch:
        procs = Processes(tmp)
        db = await Database.open(scratch.url, max_size=2)
        env = scratch.env(**SETTINGS)
        worker = ["worker", "--handler", f"{HANDLERS}:hang_first_attempt"]
        try:
            procs.start("relay", ["relay"], env)
            victim = procs.start("victim", [*worker, "--concurrency", str(count)], env)
            procs.wait_started("victim")
            await ingest_batch(db, scratch.settings(), count)
            held = await wait_count(db, "RUNNING", count, within_s=120)
            procs.start("survivor", [*worker, "--concurrency", str(count)], env)
            procs.wait_started("survivor")
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed = time.time()
            done = await wait_count(db, "COMPLETED", count, within_s=300)
            async with db.platform() as conn:
                row = await conn.fetchrow(FINISHES)
        finally:
            procs.stop_all()
            await db.close()
    first, last = float(row["first"]), float(row["last"])
    return {
        "runs": count,
        "held_by_victim": held,
        "completed": done,
        "suspects": row["suspects"],
        "uncharged": row["uncharged"],
        "first_completed_s": round(first - killed, 2),
        "last_completed_s": round(last - killed, 2),
        "isolated_span_s": round(last - first, 2),
        "per_suspect_ms": round((last - first) * 1000 / max(1, count - 1), 1),
    }


async def run_all(counts: list[int]) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "settings": SETTINGS,
        "results": [],
    }
    with tempfile.TemporaryDirectory(prefix="awooop-bench-isolation-") as tmp:
        for count in counts:
            result = await one(count, Path(tmp))
            report["results"].append(result)
            print(f"isolation {count}: {result}", file=sys.stderr)
    report["machine"]["load_avg_after"] = os.getloadavg()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="10,50", help="runs held by the killed worker")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    report = asyncio.run(run_all([int(x) for x in args.runs.split(",")]))
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
