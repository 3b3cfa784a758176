"""Benchmark: the stats loop's cost stays flat as finished runs pile up; heartbeat write cost.

    .venv/bin/python ops/bench/loops.py [--sizes 10000,300000] [--live 2000] [--repeat 20]

Builds a scratch database (migrated, dropped at the end) on AWOOOP_BENCH_PG_URL (default: the
local server), fills awooop_run_state with N finished runs plus a fixed number of live runs,
and times one ``stats_runs`` sample (median and p95 of --repeat) at each N. Also times one
heartbeat upsert. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid

import asyncpg

from awooop.core.config import load_settings
from awooop.core.logs import configure_logging
from awooop.core.loop_heartbeats import DatabaseHeartbeats
from awooop.core.loops import Heartbeat, LoopContext
from awooop.core.migrate import migrate
from awooop.loops.stats import StatsLoops
from awooop.services import Services

SERVER = os.environ.get("AWOOOP_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

FILL = """
INSERT INTO awooop_run_state (run_id, project_id, channel_type, provider_event_id, status,
    version, max_attempts, input, created_at, updated_at, finished_at, lease_until, worker_id)
SELECT gen_random_uuid(), 'bench-' || (i % 20), 'api', $4 || i, $1, 2, 3, '{}'::jsonb,
       now() - interval '1 hour', now() - interval '1 hour',
       CASE WHEN $1 IN ('COMPLETED', 'FAILED') THEN now() END,
       CASE WHEN $1 = 'RUNNING' THEN now() + interval '1 minute' END,
       CASE WHEN $1 = 'RUNNING' THEN 'w' END
FROM generate_series($2::int, $3::int) AS i
"""


def url_for(name: str) -> str:
    return SERVER.rsplit("/", 1)[0] + "/" + name


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(fn: object, repeat: int) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - started) * 1000)
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(percentile(samples, 0.95), 3),
    }


async def main(sizes: list[int], live: int, repeat: int) -> dict[str, object]:
    name = f"awooop_bench_loops_{uuid.uuid4().hex[:8]}"
    url = url_for(name)
    await migrate(url)
    admin = await asyncpg.connect(url)
    settings = load_settings(environ={}, database_url=url, redis_key_prefix=name)
    services = await Services.open(settings, db_pool_size=2)
    results: dict[str, object] = {"live_runs": live, "stats_runs": []}
    try:
        for status, count in (("PENDING", live // 2), ("RUNNING", live - live // 2)):
            await admin.execute(FILL, status, 1, count, f"live-{status}-")
        filled = 0
        stats = StatsLoops(services)
        ctx = LoopContext(project_id="__platform__")
        for size in sorted(sizes):
            if size > filled:
                await admin.execute(FILL, "COMPLETED", filled + 1, size, "done-")
                await admin.execute("ANALYZE awooop_run_state")
                filled = size
            row = {"finished_runs": size, **await timed(lambda: stats.sample_runs(ctx), repeat)}
            results["stats_runs"].append(row)  # type: ignore[attr-defined]
        sink = DatabaseHeartbeats(services.db, min_write_interval_s=0)
        beat = Heartbeat("bench", "__platform__", "platform", 1.0, True, 0)
        results["heartbeat_upsert"] = await timed(lambda: sink.record(beat), repeat * 5)
    finally:
        await services.close()
        await admin.close()
        server = await asyncpg.connect(SERVER)
        try:
            await server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await server.close()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,300000")
    parser.add_argument("--live", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    configure_logging("warning")  # stdout is the JSON result
    print(json.dumps(asyncio.run(main(sizes, args.live, args.repeat)), indent=2))
