"""Sleeping runs written straight into the tables as the write path leaves them after their
``WaitStarted`` (tests of the timers: the loop's fair pick, a worker's own timers)."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from awooop.core.db import Database
from awooop.core.events import RUN_STREAM_PREFIX

# Sleeping runs as the write path leaves them after WaitStarted (version 3: RunCreated,
# RunClaimed, WaitStarted): WAITING_EVENT, no lease, the stream's head at 3, the open wait.
SLEEPERS = """
WITH runs AS (
    INSERT INTO awooop_run_state (run_id, project_id, channel_type, provider_event_id, status,
                                  version, attempt_count, max_attempts, input, waiting_for,
                                  created_at, updated_at)
    SELECT id, $1, 'api', id::text, 'WAITING_EVENT', 3, 1, 3, '{}', 'sleep', now(), now()
    FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $2)) ids
    RETURNING run_id
), heads AS (
    INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
    SELECT $4 || run_id::text, $1, 3, pg_current_xact_id() FROM runs
)
INSERT INTO awooop_run_waits (run_id, project_id, step, kind, due_at, started_at)
SELECT run_id, $1, 'sleep:1', 'sleep', $3, now() FROM runs
RETURNING run_id
"""


async def sleepers(db: Database, project: str, count: int, due_at: datetime) -> list[uuid.UUID]:
    async with db.platform_writes() as conn:
        rows = await conn.fetch(SLEEPERS, project, count, due_at, RUN_STREAM_PREFIX)
    return [r["run_id"] for r in rows]


async def analyze(database_url: str) -> None:
    """As the tables' owner (the roles the runtime uses may not analyze them)."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("ANALYZE awooop_run_waits")
        await conn.execute("ANALYZE awooop_run_state")
    finally:
        await conn.close()
