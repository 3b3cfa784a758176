"""Benchmark: one tenant's management and console reads among 100,000 runs of its project,
for each scope (read, manage, admin), through the real server, and a tenant's slow requests
next to another's.

    .venv/bin/python ops/bench/tenant_reads.py [--runs 100000] [--repeat 10]

Builds the console benchmark's scratch database (``run_fill.fill_project``: --runs runs of the
project ``bench-big`` with their event streams, one run with 200 events, 1,000 runs of a second
project), starts ``awooop serve``, logs in to the console with a ``read`` and a ``manage``
token of ``bench-big`` and an ``admin`` token, and times the pages of :data:`PAGES` (entries of
ops/bench/console.py's table: the run list, with ``project`` + each ``blocked_on`` filter, the
bulk previews, the console's run page of the 200-event run and the bearer route
``GET /v1/projects/bench-big/runs/{id}``): median and p95 of --repeat after 2 warm-ups, against
the 300 ms budget. Then the contention phase (ops/bench/tenant_contention.py, --contention-s):
20 clients of the read session ask for the list without pause while each of its list
statements waits on a lock until the statement timeout, and a ``manage`` token of the other
project GETs one of its runs every 0.2 s: B's median must stay under 300 ms. Also records the
EXPLAIN (ANALYZE, BUFFERS) plans of the statements behind the pages as each scope runs them
(console.py's ``plans``). Prints the JSON and writes it to
ops/bench/results/tenant-reads-<time>.json; the plans also go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import console  # noqa: E402 - plain scripts beside this one
import run_fill  # noqa: E402
from console import Data, Page  # noqa: E402
from run_fill import OTHER, PROJECT  # noqa: E402
from scratch import REDIS, Scratch, report  # noqa: E402
from tenant_contention import contention  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.db import Database  # noqa: E402
from awooop.core.logs import configure_logging  # noqa: E402
from awooop.ingest import credentials  # noqa: E402
from awooop.runs.blocked import Reason  # noqa: E402
from tests.support.console import log_in  # noqa: E402

PAGES: list[Page] = [
    Page("list (no project: an admin's is across projects)", "list"),
    Page(
        "list blocked_on=pending_no_worker (no project)",
        "list",
        {"blocked_on": "pending_no_worker"},
    ),
    Page("list project", "list", {"project": PROJECT}),
    *(
        Page(
            f"list project+blocked_on={r.value}",
            "list",
            {"project": PROJECT, "blocked_on": r.value},
        )
        for r in Reason
    ),
    Page("preview retry", "preview retry", {"project": PROJECT}),
    Page("preview cancel", "preview cancel", {"project": PROJECT}),
    Page(
        "preview cancel project+blocked_on=pending_no_worker",
        "preview cancel",
        {"project": PROJECT, "blocked_on": "pending_no_worker"},
    ),
    Page(
        "preview retry project+blocked_on=failed_dead_lettered",
        "preview retry",
        {"project": PROJECT, "blocked_on": "failed_dead_lettered"},
    ),
    Page(f"run page ({run_fill.LONG_RUN_EVENTS} events)", "run page"),
    Page(f"GET run ({run_fill.LONG_RUN_EVENTS} events, bearer)", "api run"),
]


async def main(runs: int, repeat: int, contention_s: float) -> dict[str, Any]:
    async with Scratch("tenant") as scratch:
        url = scratch.url
        fill_s, long_run, events = await run_fill.fill_project(url, runs)
        data = Data(long_run=long_run)
        settings = load_settings(environ={}, database_url=url, redis_url=REDIS)
        db = await Database.open(settings.database_url, max_size=2)
        try:
            tokens = await console.tokens_for(db)
            found_plans = await console.plans(db, data, PAGES)
            _, other_token = await credentials.create_management_token(db, OTHER, "manage")
            other_run = await db.in_tenant(
                OTHER,
                lambda conn: conn.fetchval(
                    "SELECT run_id FROM awooop_run_state WHERE provider_event_id = $1",
                    f"key-{runs}",
                ),
            )
        finally:
            await db.close()
        console.print_plans(found_plans)
        base = await scratch.serve()
        scopes = {
            scope: await console.time_scope(base, token, PAGES, data, repeat=repeat, warmup=2)
            for scope, token in tokens.items()
        }
        shared = await contention(
            url, base, log_in, tokens["read"], OTHER, other_token, other_run, contention_s
        )
    return {
        "benchmark": "tenant_reads",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": runs,
        "events": events,
        "fill_s": round(fill_s, 1),
        "all_met": console.all_met(scopes) and shared["met"],
        "scopes": scopes,
        "contention": shared,
        "plans": found_plans,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--contention-s", type=float, default=15.0)
    args = parser.parse_args()
    configure_logging("warning")  # stdout is the JSON result
    report(asyncio.run(main(args.runs, args.repeat, args.contention_s)), "tenant-reads")
