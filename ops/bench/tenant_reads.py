"""Benchmark: one tenant's management and console reads among 100,000 runs of its project,
for each scope (read, manage, admin), through the real server.

    .venv/bin/python ops/bench/tenant_reads.py [--runs 100000] [--repeat 10]

Builds a scratch database (migrated, dropped at the end) on AWOOOP_BENCH_PG_URL (default: the
local server) and COPYs --runs runs of the project ``bench-big`` with their event streams into
``awooop_run_state`` and the log (statuses as in ops/bench/console.py: 90% COMPLETED, 5% FAILED,
2% PENDING, 2% RUNNING, 0.5% WAITING_APPROVAL, 0.5% CANCELLED; each run's RunCreated, RunClaimed
and RunCompleted or RunFailed, so the log holds about three events per run), plus one run with
200 events, and 1,000 runs of a second project. Starts ``awooop serve``, logs in to the console
with a ``read`` and a ``manage`` token of ``bench-big`` and an ``admin`` token, and times full
HTTP GETs per scope: the run list unfiltered, with every ``blocked_on`` filter, the bulk
previews (retry and cancel; with ``project`` + ``blocked_on`` too; a read session may not
preview: 403, recorded), the console's run page of the 200-event run and the bearer route
``GET /v1/projects/bench-big/runs/{id}`` of it: median and p95 of --repeat after 2 warm-ups,
against a 300 ms target. Then the contention phase (ops/bench/tenant_contention.py,
--contention-s): 20 clients of the read session ask for the list without pause while each of
its list statements waits on a lock until the statement timeout, and a ``manage`` token of the
other project GETs one of its runs every 0.2 s: B's median must stay under 300 ms. Also records
the EXPLAIN (ANALYZE, BUFFERS) plan of the statements
behind them as each scope runs them (the tenant role ``awooop_app`` with the project set for
read and manage sessions and for an admin naming the project; the platform role for an admin's
list across projects): the blocked-on facts of a page of 50 runs, the list's page statement,
the preview's count, and the run page's reads. Prints the JSON and writes it to
ops/bench/results/tenant-reads-<time>.json; the plans also go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import run_fill  # noqa: E402 - a plain script beside this one
from console import REDIS, Scratch, report  # noqa: E402 - a plain script
from tenant_contention import contention  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.db import Database  # noqa: E402
from awooop.core.events import (  # noqa: E402
    RunClaimed,
    RunCreated,
    StepCompleted,
    encode_event,
    event_type,
    run_stream_id,
)
from awooop.core.logs import configure_logging  # noqa: E402
from awooop.eventlog import eventlog, run_reads  # noqa: E402
from awooop.ingest import credentials  # noqa: E402
from awooop.runs import blocked_facts, listing  # noqa: E402
from awooop.runs.blocked import Reason  # noqa: E402
from tests.support.console import log_in  # noqa: E402

TARGET_MS = 300.0
PROJECT = "bench-big"
OTHER = "bench-other"
LONG_RUN_EVENTS = 200


def events_of(status: str) -> list[str]:
    claimed = [] if status == "PENDING" else ["RunClaimed"]
    end = {"COMPLETED": ["RunCompleted"], "FAILED": ["RunFailed"]}.get(status, [])
    return ["RunCreated", *claimed, *end]


def long_run_events(
    run_id: uuid.UUID, at: datetime, project: str, count: int
) -> list[tuple[str, str]]:
    """(type, JSON) of a run whose page is read: created, claimed, then steps (real event
    bodies: the page decodes them), ``count`` events in all."""
    created = RunCreated(
        at=at,
        run_id=run_id,
        project_id=project,
        channel_type="api",
        provider_event_id="key-0",
        input={},
        max_attempts=3,
    )
    claimed = RunClaimed(at=at, worker_id="w1", attempt=1, lease_until=at + timedelta(minutes=5))
    steps = [
        StepCompleted(at=at, worker_id="w1", attempt=1, step=f"s{i}", result=i)
        for i in range(count - 2)
    ]
    return [(event_type(e), encode_event(e).decode()) for e in (created, claimed, *steps)]


def tables(runs: int, seed: int = 31) -> tuple[run_fill.Tables, uuid.UUID]:
    """The runs and their events, and the run with 200 events."""
    rnd = random.Random(seed)
    now = datetime.now(UTC)
    out = run_fill.Tables()
    long_run = uuid.UUID(int=rnd.getrandbits(128), version=4)
    for i in range(runs + 1000):
        project = PROJECT if i < runs else OTHER
        run_id = long_run if i == 0 else uuid.UUID(int=rnd.getrandbits(128), version=4)
        status = "RUNNING" if i == 0 else run_fill.pick_status(rnd)
        created = now - timedelta(seconds=rnd.uniform(0, 3 * 86400))
        if i == 0:
            events = long_run_events(run_id, created, project, LONG_RUN_EVENTS)
        elif i == runs:  # the other project's run its token reads in the contention phase
            events = long_run_events(run_id, created, project, 5)
        else:
            events = [(t, "{}") for t in events_of(status)]
        out.run(
            run_fill.run_fields(
                run_id, project, f"key-{i}", status, version=len(events), created=created, now=now
            )
        )
        for version, (kind, data) in enumerate(events, 1):
            out.event(run_stream_id(run_id), version, project, kind, data)
    return out, long_run


async def fill(url: str, runs: int) -> tuple[float, uuid.UUID, int]:
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        written, long_run = tables(runs)
        await written.copy(conn)
        events = await conn.fetchval("SELECT count(*) FROM awooop_events")
        return time.perf_counter() - started, long_run, int(events)
    finally:
        await conn.close()


# --- plans ------------------------------------------------------------------------------------


async def plans_as(conn: Any, long_run: uuid.UUID) -> dict[str, str]:
    """The plans of the statements behind the timed pages, on ``conn``'s role."""
    found: dict[str, str] = {}
    now = await conn.fetchval("SELECT now()")
    f = listing.parse_filter({"project": PROJECT}, now)
    sql, names = listing.statement(f, False)
    given = listing.values(f, None, listing.PAGE)
    found["list page"] = await run_fill.explain(conn, sql, [given[n] for n in names])
    page = await conn.fetch(sql, *(given[n] for n in names))
    found["blocked-on facts of the page (50 runs)"] = await run_fill.explain(
        conn, blocked_facts.FACTS, [[r["run_id"] for r in page]]
    )
    f = listing.parse_filter({"project": PROJECT, "blocked_on": "failed"}, now)
    sql, names = listing.statement(f, False)
    given = listing.values(f, None, listing.SCAN_BATCH)
    found["list page blocked_on=failed (a batch of 200)"] = await run_fill.explain(
        conn, sql, [given[n] for n in names]
    )
    f = listing.parse_filter({"project": PROJECT, "status": "FAILED"}, now)
    sql, names = listing.count_statement(f)
    given = listing.values(f, None, 0)
    found["bulk preview count (retry)"] = await run_fill.explain(
        conn, sql, [given[n] for n in names]
    )
    found["run page: the run"] = await run_fill.explain(conn, run_reads.GET, [long_run])
    found["run page: its 200 events"] = await run_fill.explain(
        conn, eventlog.READ_STREAM, [run_stream_id(long_run), 0]
    )
    found["run page: approvals"] = await run_fill.explain(conn, listing.APPROVALS, [long_run])
    return found


async def plans(db: Database, long_run: uuid.UUID) -> dict[str, dict[str, str]]:
    tenant = await db.in_tenant(PROJECT, lambda conn: plans_as(conn, long_run))
    platform = await db.in_platform(lambda conn: plans_as(conn, long_run))
    return {
        "read, manage, admin naming the project (awooop_app, tenant set)": tenant,
        "admin across projects (awooop_platform)": platform,
    }


# --- timing -----------------------------------------------------------------------------------


def cases(long_run: uuid.UUID) -> list[tuple[str, str, dict[str, str]]]:
    """(name, path, query) of every timed request."""
    found: list[tuple[str, str, dict[str, str]]] = [
        ("list (no project: an admin's is across projects)", "/ui/runs", {}),
        (
            "list blocked_on=pending_no_worker (no project)",
            "/ui/runs",
            {"blocked_on": "pending_no_worker"},
        ),
        ("list project", "/ui/runs", {"project": PROJECT}),
    ]
    found += [
        (
            f"list project+blocked_on={r.value}",
            "/ui/runs",
            {"project": PROJECT, "blocked_on": r.value},
        )
        for r in Reason
    ]
    found += [
        ("preview retry", "/ui/bulk/retry", {"project": PROJECT}),
        ("preview cancel", "/ui/bulk/cancel", {"project": PROJECT}),
        (
            "preview cancel project+blocked_on=pending_no_worker",
            "/ui/bulk/cancel",
            {"project": PROJECT, "blocked_on": "pending_no_worker"},
        ),
        (
            "preview retry project+blocked_on=failed_dead_lettered",
            "/ui/bulk/retry",
            {"project": PROJECT, "blocked_on": "failed_dead_lettered"},
        ),
        (f"run page ({LONG_RUN_EVENTS} events)", f"/ui/runs/{PROJECT}/{long_run}", {}),
        (
            f"GET run ({LONG_RUN_EVENTS} events, bearer)",
            f"/v1/projects/{PROJECT}/runs/{long_run}",
            {},
        ),
    ]
    return found


async def time_scope(
    base: str, token: str, repeat: int, long_run: uuid.UUID
) -> list[dict[str, Any]]:
    results = []
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        await log_in(http, token)
        for name, path, params in cases(long_run):
            headers = {"authorization": f"Bearer {token}"} if path.startswith("/v1/") else {}
            samples, status = [], 0
            for i in range(2 + repeat):
                started = time.perf_counter()
                answer = await http.get(path, params=params, headers=headers)
                elapsed = (time.perf_counter() - started) * 1000
                status = answer.status_code
                if status != 200:
                    break
                if i >= 2:
                    samples.append(elapsed)
            if not samples:
                results.append({"case": name, "status": status, "allowed": False})
                continue
            ordered = sorted(samples)
            median = statistics.median(samples)
            results.append(
                {
                    "case": name,
                    "status": status,
                    "median_ms": round(median, 1),
                    "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
                    "target_ms": TARGET_MS,
                    "met": median < TARGET_MS,
                }
            )
    return results


async def main(runs: int, repeat: int, contention_s: float) -> dict[str, Any]:
    async with Scratch("tenant") as scratch:
        url = scratch.url
        fill_s, long_run, events = await fill(url, runs)
        settings = load_settings(environ={}, database_url=url, redis_url=REDIS)
        db = await Database.open(settings.database_url, max_size=2)
        try:
            tokens = {
                "read": (await credentials.create_management_token(db, PROJECT, "read"))[1],
                "manage": (await credentials.create_management_token(db, PROJECT, "manage"))[1],
                "admin": (await credentials.create_management_token(db, "__platform__", "admin"))[
                    1
                ],
            }
            found_plans = await plans(db, long_run)
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
        for role, statements in found_plans.items():
            for title, plan in statements.items():
                print(f"--- {role}: {title}\n{plan}\n", file=sys.stderr)
        base = await scratch.serve()
        scopes = {
            scope: await time_scope(base, token, repeat, long_run)
            for scope, token in tokens.items()
        }
        shared = await contention(
            url, base, log_in, tokens["read"], OTHER, other_token, other_run, contention_s
        )
    timed = [case for cases_ in scopes.values() for case in cases_ if "median_ms" in case]
    return {
        "benchmark": "tenant_reads",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": runs,
        "events": events,
        "fill_s": round(fill_s, 1),
        "all_met": all(case["met"] for case in timed) and shared["met"],
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
