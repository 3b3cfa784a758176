"""The statements behind a tenant's run list, ``blocked_on`` filters, bulk preview and run page
read the log and the run table through their indexes on EVERY role a request reaches Postgres
with: the tenant role ``awooop_app`` (read and manage sessions, an admin naming a project;
row-level security on) and the platform role (an admin's list across projects); and a producer
login's reads of its runs and their streams.

Under row-level security Postgres applies the policy's qual before any condition that is not
leakproof, so a condition like ``stream_id = 'run-' || run_id::text`` cannot be an index
condition there and each probe becomes a sequential scan of the log; the platform role, which
has no policy, hid this. The backlog is realistic (thousands of runs and their events,
analyzed), so the planner chooses by cost as it would in production."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from awooop.core.db import Connection, Database
from awooop.core.events import run_stream_id
from awooop.core.pools import SET_TENANT
from awooop.eventlog import eventlog, run_reads
from awooop.http import console_flow
from awooop.ingest import tenants
from awooop.llm import flow_store
from awooop.revisions import reads as revision_reads
from awooop.runs import (
    approvals,
    blocked_facts,
    bulk,
    children,
    concurrency,
    deadletter_list,
    listing,
    operation_list,
    output_log,
    pauses,
    signals,
)
from awooop.schedules import store as schedule_store
from tests.support.scripts import load_script

P, OTHER = "proj-plans-a", "proj-plans-b"
RUNS = 30000
run_fill = load_script("ops/bench/run_fill.py", "run_fill")
STATUSES = ("COMPLETED",) * 16 + ("FAILED", "PENDING", "RUNNING", "WAITING_APPROVAL")


async def backlog(database_url: str) -> None:
    """RUNS runs (most of them P's) with three events each, then ANALYZE."""
    now = datetime.now(UTC)
    tables = run_fill.Tables()
    for i in range(RUNS):
        run_id, project = uuid.uuid4(), P if i % 10 else OTHER
        status = STATUSES[i % len(STATUSES)]
        created = now - timedelta(seconds=i)
        tables.run(
            run_fill.run_fields(
                run_id, project, f"key-{i}", status, version=3, created=created, now=now
            )
        )
        for version, kind in enumerate(("RunCreated", "RunClaimed", "RunFailed"), 1):
            tables.event(run_stream_id(run_id), version, project, kind, "{}")
    conn = await asyncpg.connect(database_url)
    try:
        await tables.copy(conn)
    finally:
        await conn.close()


async def plan(conn: Connection, sql: str, args: list[Any]) -> str:
    return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))


async def request_plans(conn: Connection) -> dict[str, str]:
    """The plan of each statement a list, filter, preview or run page runs, on ``conn``."""
    now = await conn.fetchval("SELECT now()")
    found: dict[str, str] = {}
    for name, fields in (
        ("list", {"project": P}),
        ("list blocked_on=failed", {"project": P, "blocked_on": "failed"}),
    ):
        f = listing.parse_filter(fields, now)
        sql, names = listing.statement(f, False)
        given = listing.values(f, None, listing.SCAN_BATCH)
        found[name] = await plan(conn, sql, [given[n] for n in names])
        page = await conn.fetch(sql, *(given[n] for n in names))
        assert page, f"{name}: no runs to decide"
        found[f"{name}: blocked-on facts"] = await plan(
            conn, blocked_facts.FACTS, [[r["run_id"] for r in page]]
        )
    f = listing.parse_filter({"project": P, "status": "PENDING"}, now)
    sql, names = listing.count_statement(f)
    given = listing.values(f, None, 0)
    found["bulk preview count"] = await plan(conn, sql, [given[n] for n in names])
    run_id = await conn.fetchval("SELECT run_id FROM awooop_run_state LIMIT 1")
    found["run page: the run"] = await plan(conn, run_reads.GET, [run_id])
    found["run page: its events"] = await plan(
        conn, eventlog.READ_STREAM, [run_stream_id(run_id), 0]
    )
    found["run page: approvals"] = await plan(conn, listing.APPROVALS, [run_id])
    return found


def sequential_scans(plans: dict[str, str], tables: list[str]) -> dict[str, list[str]]:
    """The lines of each plan that read one of ``tables`` sequentially."""
    found = {
        name: [
            line.strip()
            for line in text.splitlines()
            if any(f"Seq Scan on {table} " in line for table in tables)
        ]
        for name, text in plans.items()
    }
    return {name: lines for name, lines in found.items() if lines}


async def tables_with_rows(database_url: str) -> list[str]:
    """The run table and the log's partitions that hold rows (an empty partition, a week
    ahead, is read sequentially at no cost: the planner knows it is empty)."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT DISTINCT tableoid::regclass::text AS t FROM awooop_events")
    finally:
        await conn.close()
    return ["awooop_run_state", *(r["t"] for r in rows)]


async def test_the_blocked_on_facts_probe_the_logs_index_under_row_level_security(
    database_url: str, db: Database
) -> None:
    await backlog(database_url)
    async with db.tenant(P) as conn:
        assert await conn.fetchval("SELECT current_user") == "awooop_app"
        tenant = await request_plans(conn)
    async with db.platform() as conn:
        platform = await request_plans(conn)
    for plans in (tenant, platform):
        facts = plans["list: blocked-on facts"]
        assert "stream_id_version_idx" in facts, facts
    tables = await tables_with_rows(database_url)
    assert len(tables) >= 2, tables
    assert sequential_scans(tenant, tables) == {}, tenant
    assert sequential_scans(platform, tables) == {}, platform


async def producer_plans(conn: Connection) -> dict[str, str]:
    """What a producer login may read of these (run rows and the log; no approvals)."""
    now = await conn.fetchval("SELECT now()")
    f = listing.parse_filter({"project": P}, now)
    sql, names = listing.statement(f, False)
    given = listing.values(f, None, listing.PAGE)
    run_id = await conn.fetchval("SELECT run_id FROM awooop_run_state LIMIT 1")
    assert run_id is not None
    return {
        "list": await plan(conn, sql, [given[n] for n in names]),
        "the run": await plan(conn, run_reads.GET, [run_id]),
        "its events": await plan(conn, eventlog.READ_STREAM, [run_stream_id(run_id), 0]),
    }


async def test_a_producer_logins_reads_of_runs_and_the_log_are_indexed_too(
    database_url: str,
) -> None:
    """A producer login (bound to P; restrictive policy on top of the tenant one) reading its
    runs and their streams: the same indexes."""
    await backlog(database_url)
    role = f"awooop_t_{uuid.uuid4().hex[:12]}"
    owner = await asyncpg.connect(database_url)
    try:
        await owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
        assert await tenants.grant(owner, role, [P]) == [P]
        parts = urlsplit(database_url)
        host = parts.netloc.rsplit("@", 1)[-1]
        login = urlunsplit(parts._replace(netloc=f"{role}:pw-{role}@{host}"))
        conn = await asyncpg.connect(login)
        try:
            async with conn.transaction():
                await conn.execute(SET_TENANT, P)
                plans = await producer_plans(conn)
        finally:
            await conn.close()
    finally:
        await owner.execute(f"DROP OWNED BY {role}")
        await owner.execute(f"DROP ROLE {role}")
        await owner.close()
    assert sequential_scans(plans, await tables_with_rows(database_url)) == {}, plans


def management_statements(run_id: uuid.UUID) -> dict[str, tuple[str, list[Any]]]:
    """Every other statement a management or console request runs on a tenant's rows, with
    arguments of the right types (values that match nothing change no plan)."""
    some = uuid.uuid4()
    return {
        "run: load": (run_reads.GET, [run_id]),
        "run: lock": (run_reads.LOCK, [run_id]),
        "run: its events": (eventlog.READ_STREAM, [run_stream_id(run_id), 0]),
        "run: approvals": (listing.APPROVALS, [run_id]),
        "run: its output after a position": (output_log.PAGE, [run_id, 3, output_log.PAGE_ROWS]),
        "run: its children": (children.FAMILY, [run_id, 50]),
        "run: how many children": (children.TOTAL, [run_id, children.COUNT_CAP]),
        "run: its unfinished children": (children.PENDING, [run_id]),
        "run: its open wait": (signals.WAIT, [run_id]),
        "schedules: a project's": (schedule_store.LIST, [P, schedule_store.LIST_LIMIT]),
        "schedules: one": (schedule_store.GET, [P, some]),
        "approve/reject: the approval by token": (approvals.LOCK_BY_HASH, ["0" * 64]),
        "approve/reject: the latest decision": (approvals.LATEST_DECISION, [run_id, "ship"]),
        "contracts: list": (revision_reads.LIST_CONTRACTS, [P]),
        "contracts: revisions": (revision_reads.LIST_REVISIONS, [P, "policy_routing", "c"]),
        "contracts: a revision": (revision_reads.SELECT_REVISION, [some]),
        "contracts: the pointer": (revision_reads.SELECT_POINTER, [P, "policy_routing", "c"]),
        "operations: one": (bulk.SELECT, [some]),
        "operations: recent": (bulk.RECENT, [P, 20]),
        "approve/reject without the token: the latest request": (approvals.LOCK_LATEST, [run_id]),
        "operations list: a project's page": (
            operation_list.OF_PROJECT,
            [operation_list.LATEST, operation_list.LAST_ID, 51, P],
        ),
        "operations list: every project's page": (
            operation_list.ALL,
            [operation_list.LATEST, operation_list.LAST_ID, 51],
        ),
        "dead letters: a project's page": (
            deadletter_list.PAGE_PROJECT,
            [*dead_letter_page_args(), P],
        ),
        "dead letters: every project's page": (deadletter_list.PAGE_ALL, dead_letter_page_args()),
        # the flow page (console_flow.read_flow), in a tenant transaction of the project
        "flow: pauses": (pauses.LIST, [P, False, console_flow.ROWS]),
        "flow: concurrency limits": (concurrency.LIST, [P, console_flow.ROWS]),
        "flow: concurrency per scope": (concurrency.SCOPE_USAGE, [P]),
        "flow: busiest keys": (concurrency.USAGE, [P, console_flow.KEYS]),
        "flow: rate limits": (flow_store.LIMITS.list_sql, [P, False, console_flow.ROWS]),
        "flow: budgets": (flow_store.BUDGETS.list_sql, [P, False, console_flow.ROWS]),
        "flow: model-call waits": (flow_store.WAIT_COUNTS, [P]),
        "flow: the longest waits": (flow_store.WAIT_FIRST, [P, console_flow.FIRST_WAITS]),
    }


def dead_letter_page_args() -> list[Any]:
    """A filtered batch (code and channel), since a moment, after a cursor."""
    since = datetime.now(UTC) - timedelta(days=1)
    last = (deadletter_list.LATEST, deadletter_list.LAST_ID)
    return [since, *last, deadletter_list.SCAN_BATCH, "E-RUN-005", "api"]


async def test_every_management_statement_can_be_served_by_an_index_under_row_level_security(
    database_url: str, db: Database
) -> None:
    """With sequential scans priced out (as on the connections with cached plans), a plan that
    still scans a table sequentially has no index it may use there: none is allowed, as the
    tenant role and as the platform role."""
    await backlog(database_url)
    run_id = await db.in_tenant(P, lambda c: c.fetchval("SELECT run_id FROM awooop_run_state"))

    async def plans_of(conn: Connection) -> dict[str, str]:
        await conn.execute("SET LOCAL enable_seqscan = off")
        return {
            name: await plan(conn, sql, args)
            for name, (sql, args) in management_statements(run_id).items()
        }

    tenant = await db.in_tenant(P, plans_of)
    platform = await db.in_platform(plans_of)
    for plans in (tenant, platform):
        found = {
            name: [line.strip() for line in text.splitlines() if "Seq Scan on awooop_" in line]
            for name, text in plans.items()
        }
        assert {name: lines for name, lines in found.items() if lines} == {}, plans
