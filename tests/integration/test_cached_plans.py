"""Connections with cached generic plans (awooop.core.pools.CACHED_PLAN_SETTINGS): the generic
plan of every statement they prepare, made on an EMPTY database (where a plan that scans a whole
table looks cheapest), reads each table of the project through an index. Such a plan stays good
as the tables grow; a sequential scan in it would get slower with every row."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.events import StepCompleted
from awooop.eventlog import batches
from awooop.eventlog import runs as runs_log
from awooop.runs import leases
from awooop.streams.relay import Relay
from tests.support.runs import create_runs
from tests.support.streams import keys_for

P = "proj-plans"


async def generic_plans(conn: Connection) -> dict[str, str]:
    """The generic plan of each statement prepared on ``conn``, by statement text."""
    rows = await conn.fetch(
        "SELECT name, statement, parameter_types::text[] AS types FROM pg_prepared_statements"
    )
    plans: dict[str, str] = {}
    for row in rows:
        nulls = ", ".join(f"NULL::{t}" for t in row["types"])
        arguments = f"({nulls})" if nulls else ""
        explained = await conn.fetch(f"EXPLAIN EXECUTE {row['name']}{arguments}")
        plans[row["statement"]] = "\n".join(r[0] for r in explained)
    return plans


def sequential_scans(plans: dict[str, str]) -> dict[str, list[str]]:
    found = {
        statement: [line.strip() for line in plan.splitlines() if "Seq Scan on awooop_" in line]
        for statement, plan in plans.items()
    }
    return {statement: lines for statement, lines in found.items() if lines}


async def test_the_run_pool_plans_read_every_table_through_an_index(database_url: str) -> None:
    db = await Database.open(database_url, max_size=1)
    try:
        runs = await create_runs(db, P, 2)
        await db.in_run_statement(lambda c: leases.claim_many(c, runs, "w1", 30))
        step = leases.FencedWrite(
            runs[0],
            "w1",
            1,
            lambda _s, now: StepCompleted(at=now, worker_id="w1", attempt=1, step="s", result=1),
        )
        await db.in_run_transaction(lambda c: leases.fenced_record_many(c, [step]))
        await db.in_run_statement(
            lambda c: leases.complete_many(c, [leases.Completion(runs[1], "w1", 1, None)])
        )
        async with db.run_pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
            plans = await generic_plans(conn)
    finally:
        await db.close()
    assert any("RunClaimed" in s or "awooop_run_state" in s for s in plans)
    assert len([s for s in plans if "awooop_" in s]) >= 3, list(plans)
    assert sequential_scans(plans) == {}


async def test_the_relay_plans_read_every_table_through_an_index(
    settings: Settings, db: Database, redis: Any
) -> None:
    runs = await create_runs(db, P, 2)
    await db.in_run_statement(lambda c: leases.claim_many(c, runs, "w1", 30))
    relay = Relay(settings=settings, redis=redis, keys=keys_for(settings))
    try:
        assert await relay.drain() == 4
        plans = await generic_plans(relay.conn)
    finally:
        await relay.close()
    assert sequential_scans(plans) == {}


async def test_the_tenant_sessions_plans_read_every_table_through_an_index(
    database_url: str, settings: Settings
) -> None:
    db = await Database.open(database_url, max_size=1)
    try:
        event = producer.ChannelEvent("api", "k1", {})
        first = await producer.submit(db, P, event, settings=settings)
        repeat = await producer.submit(db, P, event, settings=settings)
        assert (first.created, repeat.created, repeat.run_id) == (True, False, first.run_id)
        async with db.sessions.session(P) as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
            plans = await generic_plans(conn)
    finally:
        await db.close()
    assert any("awooop_channel_event_dedupe" in s for s in plans)
    assert sequential_scans(plans) == {}


async def test_preparing_the_run_pool_writes_nothing_and_prepares_each_connection(
    database_url: str,
) -> None:
    db = await Database.open(database_url, max_size=3)
    try:
        [run_id] = await create_runs(db, P)
        await db.on_run_connections(3, leases.prepare_run_statements)
        async with db.platform_writes() as conn:
            events = await conn.fetchval("SELECT count(*) FROM awooop_events")
            status = await conn.fetchval(
                "SELECT status FROM awooop_run_state WHERE run_id = $1", run_id
            )
        assert (events, status) == (1, "PENDING")  # RunCreated only: nothing claimed

        async def prepared(conn: Connection) -> None:
            statements = [
                r[0] for r in await conn.fetch("SELECT statement FROM pg_prepared_statements")
            ]
            assert any(s.strip() == batches.CLAIM_MANY.strip() for s in statements)
            assert any(s.strip() == batches.COMPLETE_MANY.strip() for s in statements)
            seen.add(await conn.fetchval("SELECT pg_backend_pid()"))

        seen: set[int] = set()
        await db.on_run_connections(3, prepared)
        assert len(seen) == 3  # three distinct connections, each prepared
    finally:
        await db.close()


def run_state_indexes(plan: Any) -> set[str]:
    """The names of the awooop_run_state indexes an EXPLAIN (FORMAT JSON) plan reads."""
    found: set[str] = set()
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            name = node.get("Index Name")
            if isinstance(name, str) and name.startswith("awooop_run_state"):
                found.add(name)
            nodes.extend(node.values())
    return found


def index_rows(plan: Any, index: str) -> int:
    """The most rows any scan of ``index`` returned in an EXPLAIN (ANALYZE, FORMAT JSON)."""
    most, nodes = 0, [plan]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            if node.get("Index Name") == index:
                most = max(most, int(node["Actual Rows"]))
            nodes.extend(node.values())
    return most


async def test_claims_and_completions_find_their_runs_through_the_primary_key_in_a_backlog(
    database_url: str,
) -> None:
    # A partial index over the dispatchable (or running) runs also holds every entry a claim
    # left behind since the table's last vacuum: a generic plan that ANDed it with the primary
    # key walked the whole backlog for every claim, so claims slowed as the backlog grew.
    db = await Database.open(database_url, max_size=1)
    try:
        admin = await asyncpg.connect(database_url)  # the owner: ANALYZE
        try:
            await admin.execute(
                "INSERT INTO awooop_run_state (run_id, project_id, channel_type,"
                " provider_event_id, status, version, attempt_count, max_attempts, input,"
                " created_at, updated_at, fair_tag) SELECT gen_random_uuid(), $1, 'api',"
                " 'backlog-' || g, 'PENDING', 1, 0, 3, '{}', now(), now(), g"
                " FROM generate_series(1, 3000) AS g",
                P,
            )
            await admin.execute("ANALYZE awooop_run_state")
        finally:
            await admin.close()
        [run_id] = await create_runs(db, P)
        async with db.run_pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
            await conn.execute(f"PREPARE claim_probe AS {batches.CLAIM_MANY}")
            await conn.execute(f"PREPARE complete_probe AS {batches.COMPLETE_MANY}")
            # EXPLAIN EXECUTE takes no parameters: the run id is a UUID, spelled as a literal.
            ids = f"ARRAY['{run_id}']::uuid[]"
            claim = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON)"
                f" EXECUTE claim_probe({ids}, ARRAY['{{}}'], 'w1', 30, true, NULL, NULL, 'v1')"
            )
            complete = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE complete_probe("
                f"{ids}, ARRAY['w1'], ARRAY[1], ARRAY['null'], ARRAY['{{}}'])"
            )
            status = await conn.fetchval(
                "SELECT status FROM awooop_run_state WHERE run_id = $1", run_id
            )
            await conn.execute("DEALLOCATE claim_probe; DEALLOCATE complete_probe")
    finally:
        await db.close()
    assert status == "COMPLETED"  # both statements ran, on the run asked for
    # The fair share's probe of who is ahead (claim_many.sql) reads its index, at most 16 rows
    # of it whatever the backlog (here 3,000 waiting runs of the same project, all ahead), and
    # the keyed runs' index for a keyed run ahead (none here).
    assert run_state_indexes(claim) == {
        "awooop_run_state_pkey",
        "awooop_run_state_fair_idx",
        "awooop_run_state_concurrency_idx",
    }, claim
    assert index_rows(claim, "awooop_run_state_fair_idx") <= 16, claim
    assert run_state_indexes(complete) == {"awooop_run_state_pkey"}, complete


async def test_lease_renewals_find_their_runs_through_the_primary_key_after_many_runs_ended(
    database_url: str,
) -> None:
    # The partial index of leased runs keeps an entry for every run that was leased since the
    # table's last vacuum; statistics taken after those runs ended count none of them.
    db = await Database.open(database_url, max_size=1)
    try:
        admin = await asyncpg.connect(database_url)  # the owner: ALTER TABLE, ANALYZE
        try:
            await admin.execute("ALTER TABLE awooop_run_state SET (autovacuum_enabled = false)")
            await admin.execute(
                "INSERT INTO awooop_run_state (run_id, project_id, channel_type,"
                " provider_event_id, status, version, attempt_count, max_attempts, input,"
                " worker_id, lease_until, created_at, updated_at) SELECT gen_random_uuid(), $1,"
                " 'api', 'ended-' || g, 'RUNNING', 2, 1, 3, '{}', 'w0', now() + interval '1 h',"
                " now(), now() FROM generate_series(1, 3000) AS g",
                P,
            )
            await admin.execute(
                "UPDATE awooop_run_state SET status = 'COMPLETED', lease_until = NULL"
                " WHERE worker_id = 'w0'"
            )
            await admin.execute("ANALYZE awooop_run_state")
        finally:
            await admin.close()
        [run_id] = await create_runs(db, P)
        await db.in_run_statement(lambda c: leases.claim_many(c, [run_id], "w1", 30))
        async with db.run_pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
            await conn.execute(f"PREPARE renew_probe AS {runs_log.RENEW_LEASES}")
            renew = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON)"
                f" EXECUTE renew_probe('w1', ARRAY['{run_id}']::uuid[], 30, ARRAY[1],"
                " ARRAY['a step'], ARRAY[now()])"
            )
            renewed = await conn.fetchval(
                "SELECT heartbeat_at > now() - interval '1 minute' FROM awooop_run_state"
                " WHERE run_id = $1",
                run_id,
            )
            await conn.execute("DEALLOCATE renew_probe")
    finally:
        await db.close()
    assert renewed
    assert run_state_indexes(renew) == {"awooop_run_state_pkey"}, json.dumps(renew, indent=1)
