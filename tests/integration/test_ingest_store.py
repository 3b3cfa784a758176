"""The ingest statement writes what the rest of the runtime would: rows equal their replay."""

from __future__ import annotations

import uuid

import asyncpg

from awooop import producer
from awooop.core.config import load_settings
from awooop.core.db import Database
from awooop.core.events import RunCreated, decode_event, run_stream_id
from awooop.core.sessions import TenantSessions
from awooop.eventlog import eventlog
from awooop.eventlog import ingest as log_ingest
from awooop.eventlog.state import fold
from awooop.ingest import ingest_write as ingest_store
from awooop.ingest.common import ParsedEvent
from awooop.producer import ChannelEvent
from awooop.runs import run_rows
from tests.support.waiting import eventually

PROJECT = "p1"


async def test_each_run_row_equals_the_replay_of_its_event_on_one_clock(db: Database) -> None:
    events = [
        ChannelEvent("api", f"k{i}", {"i": i, "nested": {"list": [1, None, "x"]}}) for i in range(5)
    ] + [ChannelEvent("telegram", "99", {"update_id": 99, "message": {"text": "hi"}})]
    results = await producer.submit_many(db, PROJECT, events, contract_id="triage")
    async with db.tenant(PROJECT) as conn:
        for result, event in zip(results, events, strict=True):
            row = await run_rows.load(conn, result.run_id)
            recorded = await eventlog.read_stream(conn, run_stream_id(result.run_id))
            dedupe_created = await conn.fetchval(
                "SELECT created_at FROM awooop_channel_event_dedupe WHERE run_id = $1",
                result.run_id,
            )
            assert [e.version for e in recorded] == [1]
            created = decode_event(recorded[0].data)
            assert row == fold([created])
            assert row is not None
            assert created.at == row.created_at == row.updated_at == dedupe_created
            assert (row.input, row.contract_id, row.channel_type) == (
                event.input,
                "triage",
                event.channel_type,
            )
            assert isinstance(result.run_id, uuid.UUID)


async def test_a_tenant_session_switches_project_and_sees_only_that_project(
    db: Database, database_url: str
) -> None:
    await producer.submit(db, "a", ChannelEvent("api", "ka", {}))
    await producer.submit(db, "b", ChannelEvent("api", "kb", {}))
    sessions = TenantSessions(database_url, max_size=1)  # one connection, reused
    try:
        for project in ("a", "b", "a"):
            async with sessions.session(project) as conn:
                assert not conn.is_in_transaction()
                assert await conn.fetchval("SELECT current_setting('awooop.project_id')") == project
                keys = await conn.fetch(
                    "SELECT DISTINCT provider_event_id FROM awooop_channel_event_dedupe"
                )
                assert [r[0] for r in keys] == [f"k{project}"]
    finally:
        await sessions.close()


def _dedupe_pages(plan: object) -> int:
    """Shared buffers that the plan's nodes on the dedupe table touched."""
    if isinstance(plan, list):
        return sum(_dedupe_pages(p) for p in plan)
    if not isinstance(plan, dict):
        return 0
    own = 0
    # The windows' partitions: awooop_channel_event_dedupe_pYYYYMMDD.
    scans_dedupe = str(plan.get("Relation Name", "")).startswith("awooop_channel_event_dedupe")
    if scans_dedupe and plan.get("Node Type") not in (None, "ModifyTable"):
        own = int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
    return own + sum(_dedupe_pages(v) for v in plan.values() if isinstance(v, (list, dict)))


async def test_a_repeat_probes_the_index_per_key_however_stale_the_statistics(
    db: Database, database_url: str
) -> None:
    # A dedupe lookup written as `provider_event_id = ANY($3)` became an index range scan over
    # the whole project and channel with the array as a filter whenever the statistics were
    # stale: every delivery then cost O(rows of the project), every batch O(rows x batch).
    # The lookup joins the keys instead, so a repeat costs a few pages at any table size.
    await producer.submit(db, PROJECT, ChannelEvent("api", "seen", {}))
    admin = await asyncpg.connect(database_url)
    try:  # many rows of this project and channel, and no ANALYZE afterwards
        await admin.execute(
            "INSERT INTO awooop_channel_event_dedupe (project_id, channel_type, provider_event_id,"
            " window_start, run_id, created_at, expires_at) SELECT $1, 'api', 'fill-' || g,"
            " awooop_dedupe_window(now()), gen_random_uuid(), now(), now() + interval '1 day'"
            " FROM generate_series(1, 20000) AS g",
            PROJECT,
        )
    finally:
        await admin.close()

    async def explain(conn: object) -> tuple[int, int]:
        assert isinstance(conn, asyncpg.Connection)
        config = await ingest_store.load_config(conn, load_settings(), PROJECT, "api")
        run = RunCreated(
            at=ingest_store.CLOCK_PLACEHOLDER,
            run_id=uuid.uuid4(),
            project_id=PROJECT,
            channel_type="api",
            provider_event_id="seen",
            input={},
            max_attempts=3,
            contract_id=ingest_store.DEFAULT_CONTRACT,
        )
        arguments = log_ingest.arguments(PROJECT, "api", [run], config.dedupe_ttl_s, [{}])
        plans = []
        for sql, args in (
            (log_ingest.INSERT_NEW, arguments),
            (log_ingest.LOOKUP_DEDUPE, arguments[:4]),
        ):
            plan = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
            plans.append(_dedupe_pages(plan))  # the connection's json codec decoded it
        return plans[0], plans[1]

    insert_pages, lookup_pages = await db.in_tenant(PROJECT, explain)
    assert insert_pages > 0 and lookup_pages > 0  # the probes were counted
    assert insert_pages < 40, insert_pages  # the whole project and channel is > 100 pages
    assert lookup_pages < 20, lookup_pages


async def test_cached_plans_of_the_http_sessions_probe_per_key_after_the_table_grew(
    database_url: str,
) -> None:
    # The HTTP server's session connections keep prepared statements, and after five runs
    # Postgres may cache a generic plan made while the table was tiny. Counted by the
    # statistics collector: 40 deliveries on a 50,000-row project fetch about one dedupe row
    # each (the `= ANY` lookup of before fetched 2,000,946: every row of the project, each time).
    settings = load_settings(environ={}, database_url=database_url)
    sessions = TenantSessions(database_url, max_size=1)
    admin = await asyncpg.connect(database_url)

    async def deliver(key: str) -> None:
        async with sessions.session(PROJECT) as conn:
            config = await ingest_store.load_config(conn, settings, PROJECT, "api")
            await ingest_store.ingest(conn, PROJECT, "api", [ParsedEvent(key, {})], config=config)

    async def fetched() -> int:
        await admin.execute("SELECT pg_stat_force_next_flush()")
        value = await admin.fetchval(
            "SELECT sum(idx_tup_fetch + coalesce(seq_tup_read, 0)) FROM pg_stat_user_tables "
            "WHERE relname LIKE 'awooop\\_channel\\_event\\_dedupe\\_p%'"  # the windows
        )
        return int(value or 0)

    try:
        for i in range(12):  # a tiny table while the statements turn generic
            await deliver(f"k{i}")
        await admin.execute(
            "INSERT INTO awooop_channel_event_dedupe (project_id, channel_type, provider_event_id,"
            " window_start, run_id, created_at, expires_at) SELECT $1, 'api', 'fill-' || g,"
            " awooop_dedupe_window(now()), gen_random_uuid(), now(), now() + interval '1 day'"
            " FROM generate_series(1, 50000) AS g",
            PROJECT,
        )
        before = await fetched()
        for i in range(20):
            await deliver(f"k{i % 12}")  # a repeat
            await deliver(f"n{i}")  # a first arrival
        async with sessions.session(PROJECT) as conn:  # flush that backend's statistics too
            await conn.execute("SELECT pg_stat_force_next_flush()")

        async def fetched_since() -> int:
            return await fetched() - before

        await eventually(fetched_since, interval_s=0.1, what="the deliveries' fetches counted")
        assert 0 < await fetched() - before < 1000
    finally:
        await sessions.close()
        await admin.close()
