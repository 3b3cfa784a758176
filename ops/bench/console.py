"""Benchmark: every console page against its budget, per scope, through the real server.

    .venv/bin/python ops/bench/console.py [--runs 100000] [--repeat 20] [--warmup 3]

Builds a scratch database (migrated, dropped at the end; ops/bench/scratch.py) and COPYs
--runs runs of one project with their event streams, one run with 200 events and 1,000 runs
of a second project (``run_fill.fill_project``: statuses 90% COMPLETED, 5% FAILED, 2% PENDING,
2% RUNNING, 0.5% WAITING_APPROVAL, 0.5% CANCELLED; channels 80% api down to 1% line). Starts
``awooop serve``, logs in through the console's login form with a ``read`` and a ``manage``
token of the project and an ``admin`` token, and times full HTTP GETs of every entry of
:data:`PAGES` per session: median and p95 of --repeat requests after --warmup, against the
300 ms budget for the median (``met``). A page a session may not see (a read session's bulk
previews, another project) records its status instead. Also records the EXPLAIN (ANALYZE,
BUFFERS) plan of the statements behind each page as each session runs them: the tenant role
with the project set (read and manage sessions, an admin naming a project) and the platform
role (an admin across projects). Prints the JSON and writes it to
ops/bench/results/console-<time>.json; the plans also go to stderr.

A page is one entry of :data:`PAGES`: a name, a kind of :data:`KINDS` (how its path is made and
which statements serve it) and its query. A new kind of page adds a :class:`Kind`.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import run_fill  # noqa: E402 - a plain script beside this one
from run_fill import OTHER, PROJECT  # noqa: E402
from scratch import REDIS, Scratch, report  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.db import Database  # noqa: E402
from awooop.core.events import run_stream_id  # noqa: E402
from awooop.core.logs import configure_logging  # noqa: E402
from awooop.eventlog import eventlog, run_reads  # noqa: E402
from awooop.ingest import credentials  # noqa: E402
from awooop.runs import blocked_facts, bulk, listing, search  # noqa: E402
from awooop.runs.blocked import Reason  # noqa: E402
from tests.support.console import log_in  # noqa: E402

BUDGET_MS = 300.0
ROW = re.compile(r'<td class="mono"><a href="/ui/runs/')
SCOPES = ("read", "manage", "admin")
Plans = dict[str, str]


@dataclass(frozen=True)
class Data:
    """What the pages name: the run with 200 events."""

    long_run: uuid.UUID


@dataclass(frozen=True)
class Kind:
    """How a kind of page is requested and which statements serve it.

    ``plans(conn, data, f)`` explains those statements on ``conn`` (its role as the session
    has it) for the page's filter ``f`` (already held to the session's project)."""

    path: Callable[[Data], str]
    plans: Callable[[Any, Data, listing.RunFilter], Awaitable[Plans]]
    bearer: bool = False  # the management API (a bearer token), not the console session
    rows: bool = False  # count the runs the page lists


@dataclass(frozen=True)
class Page:
    name: str
    kind: str  # a key of KINDS
    query: Mapping[str, str] = field(default_factory=dict)


# --- the statements behind each kind ---------------------------------------------------------


async def explain(conn: Any, sql: str, args: list[Any]) -> str:
    return await run_fill.explain(conn, sql, args)


async def rows_plans(conn: Any, f: listing.RunFilter, limit: int) -> Plans:
    """A page statement: ``limit`` rows (a page, or a batch of a ``blocked_on`` filter). The
    blocked-on facts of the rows are one statement whatever the filter: :func:`facts_plans`."""
    if listing.statuses(f) == []:
        return {"page": "no statement: the filter matches no status"}
    sql, names = listing.statement(f, False)
    given = listing.values(f, None, limit)
    return {f"page statement (limit {limit})": await explain(conn, sql, [given[n] for n in names])}


async def facts_plans(conn: Any, _data: Data, _f: listing.RunFilter) -> Plans:
    """The blocked-on facts of the newest runs, as many as a page, a list's first batch and a
    preview's batch decide."""
    newest = await conn.fetch(
        "SELECT run_id FROM awooop_run_state ORDER BY created_at DESC LIMIT 1000"
    )
    found: Plans = {}
    for count in (listing.PAGE, listing.SCAN_BATCH, 1000):
        run_ids = [r["run_id"] for r in newest[:count]]
        found[f"{count} runs"] = await explain(conn, blocked_facts.FACTS, [run_ids])
    return found


async def list_plans(conn: Any, _data: Data, f: listing.RunFilter) -> Plans:
    return await rows_plans(conn, f, listing.PAGE if f.reason is None else listing.SCAN_BATCH)


def preview_plans(kind: str) -> Callable[[Any, Data, listing.RunFilter], Awaitable[Plans]]:
    async def plans(conn: Any, _data: Data, f: listing.RunFilter) -> Plans:
        narrowed = bulk.for_action(kind, f)
        if narrowed.reason is not None:  # decided in batches of 1,000 (bulk.preview)
            return await rows_plans(conn, narrowed, 1000)
        if listing.statuses(narrowed) == []:
            return {"count": "no statement: the filter matches no status"}
        sql, names = listing.count_statement(narrowed)
        given = listing.values(narrowed, None, 0)
        return {"count": await explain(conn, sql, [given[n] for n in names])}

    return plans


async def run_plans(conn: Any, data: Data, _f: listing.RunFilter) -> Plans:
    run = data.long_run
    return {
        "the run": await explain(conn, run_reads.GET, [run]),
        "its events": await explain(conn, eventlog.READ_STREAM, [run_stream_id(run), 0]),
        "approvals": await explain(conn, listing.APPROVALS, [run]),
        "its blocked-on facts": await explain(conn, blocked_facts.FACTS, [[run]]),
    }


async def search_plans(conn: Any, data: Data, f: listing.RunFilter) -> Plans:
    """The search's reads (ids, keys, text: at most search.LIMIT + 1 each), then the page among
    the ids found."""
    assert f.search is not None
    term = search.classify(f.search)
    limit, statuses = search.LIMIT + 1, listing.statuses(f)
    found: Plans = {}
    if term.id_range is not None:
        found["ids"] = await explain(conn, search.BY_ID_PREFIX, [*term.id_range, limit, statuses])
    if term.key_range is not None:
        found["keys"] = await explain(
            conn, search.BY_KEY_PREFIX, [*term.key_range, limit, statuses]
        )
    found["text"] = await explain(conn, search.BY_TEXT, [f.project, term.pattern, limit, statuses])
    return found | await list_plans(conn, data, f)


KINDS: dict[str, Kind] = {
    "search": Kind(path=lambda _d: "/ui/runs", plans=search_plans, rows=True),
    "list": Kind(path=lambda _d: "/ui/runs", plans=list_plans, rows=True),
    "preview retry": Kind(path=lambda _d: "/ui/bulk/retry", plans=preview_plans("retry")),
    "preview cancel": Kind(path=lambda _d: "/ui/bulk/cancel", plans=preview_plans("cancel")),
    "run page": Kind(path=lambda d: f"/ui/runs/{PROJECT}/{d.long_run}", plans=run_plans),
    "api run": Kind(
        path=lambda d: f"/v1/projects/{PROJECT}/runs/{d.long_run}", plans=run_plans, bearer=True
    ),
}

PAGES: list[Page] = [
    Page("list", "list"),
    Page(f"list project={PROJECT}", "list", {"project": PROJECT}),
    Page(f"list project={OTHER} (1,000 runs)", "list", {"project": OTHER}),
    Page("list status=FAILED", "list", {"status": "FAILED"}),
    Page("list status=WAITING_APPROVAL", "list", {"status": "WAITING_APPROVAL"}),
    Page(f"list project={PROJECT}&status=FAILED", "list", {"project": PROJECT, "status": "FAILED"}),
    Page("list channel=telegram (10%)", "list", {"channel": "telegram"}),
    Page("list channel=line (1%)", "list", {"channel": "line"}),
    Page("list since=1h", "list", {"since": "1h"}),
    Page("list since=1h&status=FAILED", "list", {"since": "1h", "status": "FAILED"}),
    *(Page(f"list blocked_on={r.value}", "list", {"blocked_on": r.value}) for r in Reason),
    Page("search text 'order 4242' (11 runs)", "search", {"search": "order 4242"}),
    Page("search text 'customer' (every run)", "search", {"search": "customer"}),
    Page("search failure 'handler raised'", "search", {"search": "handler raised"}),
    Page("search text 'c0042'&status=FAILED", "search", {"search": "c0042", "status": "FAILED"}),
    Page("search key prefix 'key-4242'", "search", {"search": "key-4242"}),
    Page("search id prefix 'abcdef'", "search", {"search": "abcdef"}),
    Page("preview retry", "preview retry"),
    Page("preview retry search='handler raised'", "preview retry", {"search": "handler raised"}),
    Page(
        "preview retry exclude_codes=E-HANDLER-001",
        "preview retry",
        {"exclude_codes": "E-HANDLER-001"},
    ),
    Page("preview cancel", "preview cancel"),
    Page("preview retry channel=line", "preview retry", {"channel": "line"}),
    Page("preview cancel since=1h", "preview cancel", {"since": "1h"}),
    Page(
        "preview cancel blocked_on=pending_no_worker",
        "preview cancel",
        {"blocked_on": "pending_no_worker"},
    ),
    Page(
        "preview retry blocked_on=failed_dead_lettered",
        "preview retry",
        {"blocked_on": "failed_dead_lettered"},
    ),
    Page(f"run page ({run_fill.LONG_RUN_EVENTS} events)", "run page"),
]


# --- plans -----------------------------------------------------------------------------------


async def plans(db: Database, data: Data, pages: list[Page]) -> dict[str, dict[str, Plans]]:
    """Per page, the plans of its statements as a project session (read, manage: the tenant
    role, the project set) and as an admin (the platform role across projects, the tenant
    role when the page names a project) run them."""
    found: dict[str, dict[str, Plans]] = {}
    for page in pages:
        kind = KINDS[page.kind]
        f = listing.parse_filter(page.query, datetime.now(UTC))
        per_role: dict[str, Plans] = {}
        if f.project in (None, PROJECT):
            held = msgspec.structs.replace(f, project=PROJECT)
            per_role["read, manage"] = await plans_as(db, PROJECT, kind, data, held)
        per_role["admin"] = await plans_as(db, f.project, kind, data, f)
        found[page.name] = per_role
    facts = Kind(path=lambda _d: "", plans=facts_plans)
    found["(every list and preview) blocked-on facts"] = {
        "read, manage": await plans_as(db, PROJECT, facts, data, listing.RunFilter()),
        "admin": await plans_as(db, None, facts, data, listing.RunFilter()),
    }
    return found


async def plans_as(
    db: Database, project: str | None, kind: Kind, data: Data, f: listing.RunFilter
) -> Plans:
    """``kind``'s plans on the tenant role with ``project`` set, or the platform role."""

    async def explained(conn: Any) -> Plans:
        return await kind.plans(conn, data, f)

    if project is None:
        return await db.in_platform(explained)
    return await db.in_tenant(project, explained)


# --- timing ----------------------------------------------------------------------------------


async def time_page(
    http: httpx.AsyncClient,
    page: Page,
    data: Data,
    token: str,
    *,
    repeat: int,
    warmup: int,
) -> dict[str, Any]:
    kind = KINDS[page.kind]
    headers = {"authorization": f"Bearer {token}"} if kind.bearer else {}
    samples: list[float] = []
    result: dict[str, Any] = {"page": page.name}
    for i in range(warmup + repeat):
        started = time.perf_counter()
        answer = await http.get(kind.path(data), params=dict(page.query), headers=headers)
        elapsed = (time.perf_counter() - started) * 1000
        result["status"] = answer.status_code
        if answer.status_code != 200:
            return result | {"allowed": False}
        if kind.rows:
            result["rows"] = len(ROW.findall(answer.text))
        if i >= warmup:
            samples.append(elapsed)
    ordered = sorted(samples)
    median = statistics.median(samples)
    return result | {
        "median_ms": round(median, 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "budget_ms": BUDGET_MS,
        "met": median < BUDGET_MS,
    }


async def time_scope(
    base: str, token: str, pages: list[Page], data: Data, *, repeat: int, warmup: int
) -> list[dict[str, Any]]:
    """Each page timed in one console session logged in with ``token``."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        await log_in(http, token)
        return [
            await time_page(http, page, data, token, repeat=repeat, warmup=warmup) for page in pages
        ]


async def tokens_for(db: Database) -> dict[str, str]:
    """A ``read`` and a ``manage`` token of the project and an ``admin`` token."""
    return {
        "read": (await credentials.create_management_token(db, PROJECT, "read"))[1],
        "manage": (await credentials.create_management_token(db, PROJECT, "manage"))[1],
        "admin": (await credentials.create_management_token(db, "__platform__", "admin"))[1],
    }


def print_plans(found: dict[str, dict[str, Plans]]) -> None:
    for page, per_role in found.items():
        for role, statements in per_role.items():
            for title, plan in statements.items():
                print(f"--- {page} [{role}]: {title}\n{plan}\n", file=sys.stderr)


def all_met(scopes: Mapping[str, list[dict[str, Any]]]) -> bool:
    return all(case["met"] for cases in scopes.values() for case in cases if "met" in case)


async def main(runs: int, repeat: int, warmup: int) -> dict[str, Any]:
    async with Scratch("console") as scratch:
        fill_s, long_run, events = await run_fill.fill_project(scratch.url, runs)
        data = Data(long_run=long_run)
        settings = load_settings(environ={}, database_url=scratch.url, redis_url=REDIS)
        db = await Database.open(settings.database_url, max_size=2)
        try:
            tokens = await tokens_for(db)
            found_plans = await plans(db, data, PAGES)
        finally:
            await db.close()
        print_plans(found_plans)
        base = await scratch.serve()
        scopes = {
            scope: await time_scope(base, tokens[scope], PAGES, data, repeat=repeat, warmup=warmup)
            for scope in SCOPES
        }
    return {
        "benchmark": "console",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": runs,
        "events": events,
        "fill_s": round(fill_s, 1),
        "repeat": repeat,
        "warmup": warmup,
        "all_met": all_met(scopes),
        "scopes": scopes,
        "plans": found_plans,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    configure_logging("warning")  # stdout is the JSON result
    report(asyncio.run(main(args.runs, args.repeat, args.warmup)), "console")
