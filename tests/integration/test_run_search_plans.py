"""The run search's reads are indexed on the roles requests reach Postgres with: the tenant
role ``awooop_app`` (read and manage sessions, an admin naming a project; row-level security
on) and the platform role (an admin's search across projects).

ILIKE is not leakproof: under row-level security Postgres applies it only after the tenant
policy, so a plain ``... ILIKE`` as ``awooop_app`` reads every run of the project (shown
below). awooop_search_runs() (migration 0128) runs it through the trigram index; a function
call's plan is not in the caller's EXPLAIN, so the proof is what the call reads (its buffers
are counted in the caller's node) against the size of the table, and the inner statement's
plan as the function's owner runs it. Id and key prefixes are leakproof ranges: their plans
as awooop_app name the indexes."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from awooop.core.db import Connection, Database
from awooop.runs import bulk, bulk_preview, listing, search

P, OTHER = "proj-search-a", "proj-search-b"
RUNS = 30000
LEASED = 300
WORDS = ("deploy", "restart", "rollback", "scale", "status", "report", "backup", "alert")


async def backlog(database_url: str) -> None:
    """RUNS runs (most of them P's), each input a few words and a number, then ANALYZE."""
    now = datetime.now(UTC)
    records = []
    for i in range(RUNS):
        failed = i % 7 == 0
        text = f"{WORDS[i % len(WORDS)]} service-{i} in region {WORDS[(i * 3) % len(WORDS)]}"
        records.append(
            (
                uuid.uuid4(),
                P if i % 10 else OTHER,
                "api",
                f"tg-{i:08d}",
                "FAILED" if failed else "COMPLETED",
                2,
                1,
                3,
                f"handler raised on item-{i}" if failed else None,
                "E-HANDLER-001" if failed else None,
                json.dumps({"text": text}),
                None if failed else json.dumps({"answer": f"done {i}"}),
                now - timedelta(seconds=i),
                now - timedelta(seconds=i),
            )
        )
    for i in range(LEASED):  # claimed runs: the index leaves them out (migration 0160)
        records.append(
            (
                uuid.uuid4(), P, "api", f"tl-{i:08d}", "RUNNING", 2, 1, 3, None, None,
                json.dumps({"text": f"in flight job-{i:04d}"}), None, now, now,
            )
        )  # fmt: skip
    conn = await asyncpg.connect(database_url)
    try:
        await conn.copy_records_to_table(
            "awooop_run_state",
            records=records,
            columns=[
                "run_id", "project_id", "channel_type", "provider_event_id", "status",
                "version", "attempt_count", "max_attempts", "failure_reason", "failure_code",
                "input", "result", "created_at", "updated_at",
            ],
        )  # fmt: skip
        await conn.execute("VACUUM ANALYZE awooop_run_state")
    finally:
        await conn.close()


async def explain(conn: Connection, sql: str, args: list[Any]) -> str:
    rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + sql, *args)
    return "\n".join(r[0] for r in rows)


def buffers(plan: str) -> int:
    """The buffers the plan's top node read (shared hit + read)."""
    found = re.search(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?", plan)
    assert found is not None, plan
    return sum(int(n) for n in found.groups() if n)


async def table_pages(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        pages = await conn.fetchval(
            "SELECT relpages FROM pg_class WHERE relname = 'awooop_run_state'"
        )
        return int(pages)
    finally:
        await conn.close()


async def search_plans(conn: Connection, project: str | None) -> dict[str, str]:
    """EXPLAIN (ANALYZE, BUFFERS) of each read of a search for ``project``'s scope."""
    term = search.classify("item-2121")  # one run's failure reason: a rare term
    key = search.classify("tg-0000212")
    run_id = await conn.fetchval(
        "SELECT run_id FROM awooop_run_state WHERE provider_event_id = 'tg-00002121'"
    )
    assert run_id is not None
    ids = search.classify(str(run_id)[:6])
    assert ids.id_range is not None and key.key_range is not None
    # once first: the function's first call in a session reads the catalog to plan
    await conn.fetch(search.BY_TEXT, project, term.pattern, search.LIMIT + 1, None)
    plans = {
        "text": await explain(
            conn, search.BY_TEXT, [project, term.pattern, search.LIMIT + 1, ["FAILED"]]
        ),
        "key prefix": await explain(conn, search.BY_KEY_PREFIX, [*key.key_range, 1001, None]),
        "id prefix": await explain(conn, search.BY_ID_PREFIX, [*ids.id_range, 1001, None]),
    }
    found = await search.find(conn, "item-2121", project)
    assert run_id in found.run_ids
    leased = search.classify("job-0217")  # a claimed run's input: read from the row
    plans["leased text"] = await explain(
        conn, search.BY_TEXT, [project, leased.pattern, search.LIMIT + 1, None]
    )
    claimed = await search.find(conn, "job-0217", project)
    assert len(claimed.run_ids) == 1, claimed
    assert (
        await conn.fetchval(
            "SELECT status FROM awooop_run_state WHERE run_id = $1", claimed.run_ids[0]
        )
        == "RUNNING"
    )
    f = listing.parse_filter({"search": "item-2121", "status": "FAILED"}, datetime.now(UTC))
    sql, names = listing.statement(f, False)
    given = listing.values(f, None, listing.PAGE, found)
    plans["page"] = await explain(conn, sql, [given[n] for n in names])
    return plans


async def test_search_reads_use_their_indexes_as_the_tenant_and_the_platform_role(
    database_url: str, db: Database
) -> None:
    await backlog(database_url)
    pages = await table_pages(database_url)
    assert pages > 300, pages
    async with db.tenant(P) as conn:
        assert await conn.fetchval("SELECT current_user") == "awooop_app"
        tenant = await search_plans(conn, P)
        plain = await explain(
            conn,
            "SELECT run_id FROM awooop_run_state WHERE input::text ILIKE $1 LIMIT 10",
            ["%item-2121%"],
        )
    async with db.platform() as conn:
        platform = await search_plans(conn, None)
    for plans in (tenant, platform):
        # the function read a handful of index and heap pages, not the table; a term found
        # among the leased runs, which it reads directly, costs at most a page per leased run
        assert buffers(plans["text"]) < pages // 10, (buffers(plans["text"]), plans["text"])
        leased = buffers(plans["leased text"])
        assert leased < LEASED + 30 < pages // 2, (leased, plans["leased text"])
        assert "awooop_run_state_key_pattern_idx" in plans["key prefix"], plans["key prefix"]
        assert "awooop_run_state_pkey" in plans["id prefix"], plans["id prefix"]
        assert "awooop_run_state_pkey" in plans["page"], plans["page"]
        assert all("Seq Scan" not in text for text in plans.values()), plans
    # the reason for the function: the same ILIKE under row-level security reads the table
    assert "Seq Scan on awooop_run_state" in plain, plain
    # and inside it, as its owner (who bypasses row-level security): the trigram index for the
    # runs it holds, an index of the leased runs for the others, for a project and for all
    for project in (P, None):
        inner = await inner_plan(database_url, project)
        assert "Index Scan on awooop_run_state_search_settled_idx" in inner, inner
        leased = r"Index Scan (using|on) awooop_run_state_(leased_worker|project_status)"
        assert re.search(leased, inner), inner
        assert "Seq Scan" not in inner, inner


async def inner_plan(database_url: str, project: str | None) -> str:
    """The plan of the statement awooop_search_runs() runs, as Postgres made it for these
    values: auto_explain's plans of nested statements, sent to this session as LOG messages."""
    owner = await asyncpg.connect(database_url)
    logged: list[str] = []
    owner.add_log_listener(lambda _conn, message: logged.append(message.message))
    try:
        await owner.execute("LOAD 'auto_explain'")
        await owner.execute(
            "SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;"
            " SET client_min_messages = log"
        )
        await owner.fetch(search.BY_TEXT, project, "%item-2121%", 1001, None)
    finally:
        await owner.close()
    plans = [m for m in logged if "FROM public.awooop_run_state r" in m]
    assert len(plans) == 1, logged
    return plans[0]


async def preview_plans(conn: Connection, project: str | None) -> dict[str, str]:
    """The statements of a bulk retry's preview that leaves a failure code out: the counts
    per project and failure code, and the first page of runs."""
    fields = {"exclude_codes": "E-RUN-004"} | ({"project": project} if project else {})
    f = bulk.for_action("retry", listing.parse_filter(fields, datetime.now(UTC)))
    count_sql, count_names = listing.count_statement(f)
    given = listing.values(f, None, 0)
    page_sql, page_names = listing.statement(f, False)
    page_given = listing.values(f, None, bulk_preview.PREVIEW_ROWS)
    return {
        "counts": await explain(conn, count_sql, [given[n] for n in count_names]),
        "first page": await explain(conn, page_sql, [page_given[n] for n in page_names]),
    }


async def test_a_bulk_previews_counts_and_first_page_are_indexed_reads(
    database_url: str, db: Database
) -> None:
    await backlog(database_url)
    async with db.tenant(P) as conn:
        tenant = await preview_plans(conn, P)
    async with db.platform() as conn:
        platform = await preview_plans(conn, None)
    for plans in (tenant, platform):
        assert all("Seq Scan" not in text for text in plans.values()), plans
        assert "awooop_run_state_failed_idx" in plans["counts"] or (
            "status_created_idx" in plans["counts"]
        ), plans["counts"]
        assert "status_created_idx" in plans["first page"], plans["first page"]
