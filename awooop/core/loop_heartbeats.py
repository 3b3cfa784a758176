"""Loop state in Postgres: heartbeats behind ``awooop loops list``, projects for per-tenant loops.

``awooop_loop_heartbeats`` has one row per (loop_name, project_id), upserted (platform role,
database clock) after iterations: ``last_success_at`` / ``last_failure_at`` / ``last_error`` /
``consecutive_failures``, and which host and pid ran it. Writes are throttled per loop to one
per :data:`MIN_WRITE_INTERVAL_S` while nothing changes (a relay woken by NOTIFY can iterate many
times a second); a failure, or the first success after failures, is always written. So
``last_success_at`` may trail the real last run by up to that interval; the Prometheus gauge
``awooop_background_loop_last_run_timestamp`` is exact.

``awooop_projects`` (filled by a trigger on ``awooop_event_streams``, see migration 0040) is the
list per-tenant loops run one instance for.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.loops import HEARTBEAT_TIMEOUT_S, Heartbeat, ProjectSource

MIN_WRITE_INTERVAL_S = 1.0
# A loop is stale (``awooop loops list``: stopped; ``awooop doctor``: FAIL) when its row has not
# moved for this many cycles, plus the write throttle above: a healthy loop's row may trail by up
# to MIN_WRITE_INTERVAL_S, which is more than five cycles of a loop that runs every 0.2 s.
LOOP_STALE_INTERVALS = 5


def stale_after_s(interval_s: float) -> float:
    """Pure: how old a loop's heartbeat row may be before the loop counts as stale."""
    return interval_s * LOOP_STALE_INTERVALS + MIN_WRITE_INTERVAL_S


# --- SQL ----------------------------------------------------------------------------------------
UPSERT_HEARTBEAT = """
INSERT INTO awooop_loop_heartbeats AS h (
    loop_name, project_id, category, interval_s, last_success_at, last_failure_at, last_error,
    consecutive_failures, host, pid, updated_at)
VALUES ($1, $2, $3, $4,
        CASE WHEN $5 THEN now() END, CASE WHEN $5 THEN NULL ELSE now() END,
        $6, $7, $8, $9, now())
ON CONFLICT (loop_name, project_id) DO UPDATE SET
    category = EXCLUDED.category,
    interval_s = EXCLUDED.interval_s,
    last_success_at = COALESCE(EXCLUDED.last_success_at, h.last_success_at),
    last_failure_at = COALESCE(EXCLUDED.last_failure_at, h.last_failure_at),
    last_error = COALESCE(EXCLUDED.last_error, h.last_error),
    consecutive_failures = EXCLUDED.consecutive_failures,
    host = EXCLUDED.host,
    pid = EXCLUDED.pid,
    updated_at = now()
"""
SELECT_HEARTBEATS = """
SELECT loop_name, project_id, category, interval_s, last_success_at, last_failure_at,
       last_error, consecutive_failures, host, pid, updated_at, now() AS db_now
FROM awooop_loop_heartbeats
ORDER BY loop_name, project_id
"""
SELECT_PROJECTS = """
SELECT project_id FROM awooop_projects
WHERE NOT disabled AND project_id <> $1
ORDER BY project_id
"""
# -----------------------------------------------------------------------------------------------


class DatabaseHeartbeats:
    """A :class:`awooop.core.loops.HeartbeatSink` writing ``awooop_loop_heartbeats``."""

    def __init__(self, db: Database, min_write_interval_s: float = MIN_WRITE_INTERVAL_S) -> None:
        self.db = db
        self.min_write_interval_s = min_write_interval_s
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._last: dict[tuple[str, str], tuple[float, bool]] = {}

    def should_write(self, beat: Heartbeat, now: float) -> bool:
        """Pure throttle: write failures and state changes always, successes once a second."""
        last = self._last.get((beat.loop_name, beat.project_id))
        if last is None or not beat.ok or not last[1]:
            return True
        return now - last[0] >= self.min_write_interval_s

    async def record(self, beat: Heartbeat) -> None:
        now = time.monotonic()
        if not self.should_write(beat, now):
            return
        async with asyncio.timeout(HEARTBEAT_TIMEOUT_S), self.db.platform_writes() as conn:
            await conn.execute(
                UPSERT_HEARTBEAT,
                beat.loop_name,
                beat.project_id,
                beat.category,
                beat.interval_s,
                beat.ok,
                beat.error,
                beat.consecutive_failures,
                self.host,
                self.pid,
            )
        self._last[(beat.loop_name, beat.project_id)] = (now, beat.ok)


@dataclass(frozen=True)
class HeartbeatRow:
    loop_name: str
    project_id: str
    category: str
    interval_s: float
    last_success_at: datetime | None
    last_failure_at: datetime | None
    last_error: str | None
    consecutive_failures: int
    host: str
    pid: int
    updated_at: datetime
    db_now: datetime


async def read_heartbeats(db: Database) -> list[HeartbeatRow]:
    async with db.platform() as conn:
        rows = await conn.fetch(SELECT_HEARTBEATS)
    return [HeartbeatRow(**dict(row.items())) for row in rows]


def project_source(db: Database) -> ProjectSource:
    """The per-tenant project list: enabled rows of ``awooop_projects`` except the platform."""

    async def projects() -> list[str]:
        async with db.platform() as conn:
            rows = await conn.fetch(SELECT_PROJECTS, PLATFORM_PROJECT)
        return [str(row["project_id"]) for row in rows]

    return projects
