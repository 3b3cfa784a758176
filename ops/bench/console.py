"""Benchmark: a page of 50 runs of the console among 1,000,000 runs, through the real server.

    .venv/bin/python ops/bench/console.py [--runs 1000000] [--repeat 30]

Builds a scratch database (migrated, dropped at the end) on AWOOOP_BENCH_PG_URL (default: the
local server) and COPYs --runs rows into awooop_run_state with every index of the migrations
in place: 20 projects of about 5% each and one small project (0.05%), statuses as a busy
installation has them (90% COMPLETED, 5% FAILED, 2% PENDING, 2% RUNNING, 0.5% WAITING_APPROVAL,
0.5% CANCELLED), created over 30 days. Starts ``awooop serve`` on a free port, logs in with an
admin token through the login form (a session cookie), and times full HTTP GETs of
``/ui/runs`` (the page rendered, 50 rows checked) for: no filter, a status filter, a project
filter, a small project, a project and status, and a ``blocked_on`` filter: median and p95 of
--repeat after 5 warm-up requests. Also records the EXPLAIN (ANALYZE, BUFFERS) plan of each
page's statement (awooop.runs.listing.statement) and of the other readers of
awooop_run_state's (project_id, status, ...) index. Prints the JSON and writes it to
ops/bench/results/console-<time>.json; the plans also go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from awooop.core.config import load_settings
from awooop.core.db import Database
from awooop.core.logs import configure_logging
from awooop.core.migrate import migrate
from awooop.ingest import credentials
from awooop.loops.stats import SAMPLE_RUNS
from awooop.runs import listing, reads
from awooop.runs.blocked_facts import FAILED_COUNTS

# Beside this script, and the tests' way into the console (a plain script: not a package).
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
import run_fill  # noqa: E402

from tests.support.console import log_in  # noqa: E402

SERVER = os.environ.get("AWOOOP_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("AWOOOP_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 200.0
CASES: list[tuple[str, dict[str, str]]] = [
    ("unfiltered", {}),
    ("status=FAILED", {"status": "FAILED"}),
    ("project=bench-3", {"project": "bench-3"}),
    ("project=bench-small", {"project": "bench-small"}),
    ("project=bench-3&status=FAILED", {"project": "bench-3", "status": "FAILED"}),
    ("blocked_on=failed", {"blocked_on": "failed"}),
    ("blocked_on=running", {"blocked_on": "running"}),
]
ROW = re.compile(r'<td class="mono"><a href="/ui/runs/')


def url_for(name: str) -> str:
    return SERVER.rsplit("/", 1)[0] + "/" + name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tables(count: int, seed: int = 22) -> run_fill.Tables:
    """The runs (a deterministic mix, see the docstring), no events."""
    rnd = random.Random(seed)
    now = datetime.now(UTC)
    out = run_fill.Tables()
    for i in range(count):
        project = "bench-small" if i % 2000 == 0 else f"bench-{rnd.randrange(20)}"
        run_id = uuid.UUID(int=rnd.getrandbits(128), version=4)
        created = now - timedelta(seconds=rnd.uniform(0, 30 * 86400))
        status = run_fill.pick_status(rnd)
        out.run(
            run_fill.run_fields(
                run_id, project, f"key-{i}", status, version=3, created=created, now=now
            )
        )
    return out


async def fill(url: str, count: int) -> float:
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        await tables(count).copy(conn)
        return time.perf_counter() - started
    finally:
        await conn.close()


async def plans(url: str) -> dict[str, str]:
    """The plan of each case's page statement, and of the other (project_id, status) readers."""
    conn = await asyncpg.connect(url)
    found: dict[str, str] = {}
    try:
        now = await conn.fetchval("SELECT now()")
        for name, params in CASES:
            f = listing.parse_filter(params, now)
            sql, names = listing.statement(f, False)
            given = listing.values(f, None, listing.PAGE if f.reason is None else 200)
            found[f"page {name}"] = await run_fill.explain(conn, sql, [given[n] for n in names])
            cursor = await conn.fetchrow(
                "SELECT created_at, run_id FROM awooop_run_state "
                "ORDER BY created_at DESC, run_id DESC OFFSET 5000 LIMIT 1"
            )
        f = listing.parse_filter({}, now)
        sql, names = listing.statement(f, True)
        given = listing.values(f, listing.Cursor(cursor[0], cursor[1]), listing.PAGE)
        found["page unfiltered, after 100 pages (before=...)"] = await run_fill.explain(
            conn, sql, [given[n] for n in names]
        )
        sql, names = listing.count_statement(listing.parse_filter({"status": "FAILED"}, now))
        given = listing.values(listing.parse_filter({"status": "FAILED"}, now), None, 0)
        found["bulk preview count status=FAILED"] = await run_fill.explain(
            conn, sql, [given[n] for n in names]
        )
        found["runs list --project --status"] = await run_fill.explain(
            conn, reads.LIST_RUNS, ["bench-3", "FAILED", None, 50]
        )
        found["stats sample"] = await run_fill.explain(conn, SAMPLE_RUNS, [30.0, 0.0])
        found["blocked_on gauge FAILED counts"] = await run_fill.explain(conn, FAILED_COUNTS, [])
    finally:
        await conn.close()
    return found


def report(result: dict[str, Any], name: str) -> None:
    """Print ``result`` as JSON and keep it in ``results/<name>-<time>.json``."""
    text = json.dumps(result, indent=2)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M")
    (RESULTS / f"{name}-{stamp}.json").write_text(text + "\n")
    print(text)


class Scratch:
    """A migrated scratch database of the benchmark, and the ``awooop serve`` it starts on it;
    both gone when the ``async with`` block ends."""

    def __init__(self, kind: str) -> None:
        self.name = f"awooop_bench_{kind}_{uuid.uuid4().hex[:8]}"
        self.url = url_for(self.name)
        self.proc: subprocess.Popen[bytes] | None = None

    async def __aenter__(self) -> Scratch:
        await migrate(self.url)
        return self

    async def serve(self) -> str:
        """Start ``awooop serve`` on the database; its base URL."""
        self.proc, base = await start_server(self.url, self.name)
        return base

    async def __aexit__(self, *_exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        server = await asyncpg.connect(SERVER)
        try:
            await server.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await server.close()


async def start_server(url: str, prefix: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": url,
        "AWOOOP_REDIS_URL": REDIS,
        "AWOOOP_REDIS_KEY_PREFIX": prefix,
        "AWOOOP_LOG_LEVEL": "warning",
    }
    exe = Path(sys.executable).with_name("awooop")
    argv = [str(exe), "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env)  # noqa: ASYNC220 - started once, before timing
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient() as http:
        while True:
            try:
                if (await http.get(base + "/readyz")).status_code == 200:
                    return proc, base
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("awooop serve did not become ready")
            await asyncio.sleep(0.2)


async def time_pages(base: str, token: str, repeat: int) -> list[dict[str, Any]]:
    results = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        await log_in(http, token)
        for name, params in CASES:
            samples = []
            rows = 0
            for i in range(5 + repeat):
                started = time.perf_counter()
                page = await http.get("/ui/runs", params=params)
                elapsed = (time.perf_counter() - started) * 1000
                assert page.status_code == 200, page.text[:300]
                rows = len(ROW.findall(page.text))
                if i >= 5:
                    samples.append(elapsed)
            ordered = sorted(samples)
            median = statistics.median(samples)
            results.append(
                {
                    "filter": name,
                    "rows": rows,
                    "median_ms": round(median, 2),
                    "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
                    "target_ms": TARGET_MS,
                    "met": median < TARGET_MS and rows == listing.PAGE,
                }
            )
    return results


async def main(runs: int, repeat: int) -> dict[str, Any]:
    async with Scratch("console") as scratch:
        url = scratch.url
        fill_s = await fill(url, runs)
        settings = load_settings(environ={}, database_url=url, redis_url=REDIS)
        db = await Database.open(settings.database_url, max_size=2)
        try:
            _, token = await credentials.create_management_token(db, "__platform__", "admin")
        finally:
            await db.close()
        found_plans = await plans(url)
        for title, plan in found_plans.items():
            print(f"--- {title}\n{plan}\n", file=sys.stderr)
        pages = await time_pages(await scratch.serve(), token, repeat)
    return {
        "benchmark": "console",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": runs,
        "fill_s": round(fill_s, 1),
        "pages": pages,
        "plans": found_plans,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    configure_logging("warning")  # stdout is the JSON result
    report(asyncio.run(main(args.runs, args.repeat)), "console")
