"""The ingest statement writes what the rest of the runtime would: rows equal their replay."""

from __future__ import annotations

import uuid

from awooop import eventlog, producer
from awooop.db import Database
from awooop.events import decode_event, run_stream_id
from awooop.ingest.sessions import TenantSessions
from awooop.producer import ChannelEvent
from awooop.runs import store
from awooop.runs.state import fold

PROJECT = "p1"


async def test_each_run_row_equals_the_replay_of_its_event_on_one_clock(db: Database) -> None:
    events = [
        ChannelEvent("api", f"k{i}", {"i": i, "nested": {"list": [1, None, "x"]}}) for i in range(5)
    ] + [ChannelEvent("telegram", "99", {"update_id": 99, "message": {"text": "hi"}})]
    results = await producer.submit_many(db, PROJECT, events, contract_id="triage")
    async with db.tenant(PROJECT) as conn:
        for result, event in zip(results, events, strict=True):
            row = await store.load(conn, result.run_id)
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
                keys = await conn.fetch("SELECT provider_event_id FROM awooop_channel_event_dedupe")
                assert [r[0] for r in keys] == [f"k{project}"]
    finally:
        await sessions.close()
