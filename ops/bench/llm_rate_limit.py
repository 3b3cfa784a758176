"""Benchmark: a model-call rate limit of 10 calls a second across three worker processes.

    .venv/bin/python ops/bench/llm_rate_limit.py [--rate 10] [--window-s 60] [--out FILE]

Real ``awooop relay`` and three ``awooop worker`` processes (concurrency 10 each, the local
model) on a scratch database (``worker.py``'s Scratch). The project gets a rate limit of
``--rate`` calls per second with a burst of 1 (``awooop projects rate-limit``); enough runs
are submitted that 30 calls always wait for their token for ``--window-s`` plus 10 s. Each
call's start (``ModelCalled.started_at``: after its token was due) is read from the log; the
figure is the number of calls that started in a window of ``--window-s`` seconds beginning 5 s
after the first start, against ``rate * window``, and the calls per worker process. Prints one
JSON object (and writes it to ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

from worker import HANDLERS, PROJECT, Processes, Scratch  # noqa: E402

from awooop.core.db import Database  # noqa: E402 - after the sys.path line, for a plain script
from awooop.llm import flow_store  # noqa: E402
from awooop.producer import ChannelEvent, submit_many  # noqa: E402

WORKERS, CONCURRENCY, CALLS_PER_RUN = 3, 10, 10

STARTS = """
SELECT (data ->> 'started_at')::timestamptz AS started_at, data ->> 'worker_id' AS worker_id
FROM awooop_events WHERE event_type = 'ModelCalled' AND data ->> 'outcome' = 'ok'
ORDER BY 1
"""


async def measure(rate: int, window_s: float, tmp: Path) -> dict[str, Any]:
    calls = math.ceil(rate * (window_s + 15))
    runs = math.ceil(calls / CALLS_PER_RUN)
    async with Scratch() as scratch:
        procs = Processes(tmp)
        db = await Database.open(scratch.url, max_size=2)
        env = scratch.env(lease_ttl_s="10", heartbeat_interval_s="1")
        try:
            async with db.tenant(PROJECT) as conn:
                await flow_store.set_limit(
                    conn, PROJECT, "", limit=rate, period_s=1.0, burst=1, actor="bench"
                )
            procs.start("relay", ["relay"], env)
            for i in range(WORKERS):
                args = ["worker", "--handler", f"{HANDLERS}:model_calls"]
                procs.start(f"w{i}", [*args, "--concurrency", str(CONCURRENCY)], env)
                procs.wait_started(f"w{i}")
            events = [ChannelEvent("api", f"rl-{n}", {"calls": CALLS_PER_RUN}) for n in range(runs)]
            await submit_many(db, PROJECT, events, settings=scratch.settings())
            started = time.monotonic()
            deadline = started + window_s * 3 + 120
            while time.monotonic() < deadline:
                async with db.platform() as conn:
                    done = await conn.fetchval(
                        "SELECT count(*) FROM awooop_run_state WHERE status = 'COMPLETED'"
                    )
                if done >= runs:
                    break
                await asyncio.sleep(1.0)
            async with db.platform() as conn:
                rows = await conn.fetch(STARTS)
                granted = await conn.fetchval("SELECT sum(granted) FROM awooop_llm_rate_limits")
        finally:
            procs.stop_all()
            await db.close()
    starts = [r["started_at"] for r in rows]
    begin = starts[0] + timedelta(seconds=5)
    end = begin + timedelta(seconds=window_s)
    inside = sum(1 for s in starts if begin <= s < end)
    expected = rate * window_s
    return {
        "benchmark": "llm_rate_limit",
        "rate_per_s": rate,
        "burst": 1,
        "workers": WORKERS,
        "concurrency": CONCURRENCY,
        "window_s": window_s,
        "calls_total": len(starts),
        "granted_total": int(granted or 0),
        "calls_in_window": inside,
        "expected_in_window": expected,
        "deviation_pct": round(100.0 * (inside - expected) / expected, 2),
        "calls_per_worker": dict(Counter(r["worker_id"] for r in rows)),
        "window_filled": starts[-1] > end,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(args.rate, args.window_s, Path(tmp)))
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
