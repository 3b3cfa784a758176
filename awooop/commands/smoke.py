"""``awooop smoke``: one run through the write path (create, claim, step, complete).

A quick check that a migrated database accepts the run lifecycle; it prints the run's events.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import timedelta
from typing import Any

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunClaimed, RunCompleted, RunCreated, StepCompleted, run_stream_id
from awooop.eventlog import eventlog
from awooop.eventlog.runs import create_run
from awooop.runs import run_rows

PROJECT = "smoke"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("smoke", help="drive one run through the write path")
    parser.set_defaults(run=run)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database.open(settings.database_url, max_size=2)
    run_id = uuid.uuid4()
    worker = f"smoke-{uuid.uuid4().hex[:8]}"
    try:
        async with db.tenant(PROJECT) as conn:
            now = await conn.fetchval("SELECT now()")
            await create_run(
                conn,
                RunCreated(
                    at=now,
                    run_id=run_id,
                    project_id=PROJECT,
                    channel_type="api",
                    provider_event_id=str(run_id),
                    input={"hello": "world"},
                    max_attempts=settings.max_attempts,
                ),
            )
        async with db.tenant(PROJECT) as conn:
            await run_rows.record(
                conn,
                run_id,
                lambda s, now: RunClaimed(
                    at=now,
                    worker_id=worker,
                    attempt=s.attempt_count + 1,
                    lease_until=now + timedelta(seconds=settings.lease_ttl_s),
                ),
            )
        async with db.tenant(PROJECT) as conn:
            await run_rows.record(
                conn,
                run_id,
                lambda s, now: StepCompleted(
                    at=now, worker_id=worker, attempt=s.attempt_count, step="greet", result="hi"
                ),
            )
            state = await run_rows.record(
                conn,
                run_id,
                lambda s, now: RunCompleted(
                    at=now, worker_id=worker, attempt=s.attempt_count, result={"ok": True}
                ),
            )
            events = await eventlog.read_stream(conn, run_stream_id(run_id))
    finally:
        await db.close()
    for e in events:
        print(f"  v{e.version} {e.event_type:<14} position={e.position}")
    print(f"run {run_id} {state.status} after {len(events)} events")
    return 0 if state.status == "COMPLETED" else 1
