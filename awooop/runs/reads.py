"""Operator reads of runs: the listing behind ``awooop runs list``.

The listing reads ``awooop_run_state`` (the inline projection, always current) on the
platform role so that it can span projects; ``--project`` narrows it (the
``(project_id, status)`` index serves both filters). Rows come most recently changed first,
at most ``limit`` of them. ``--since`` keeps runs created at or after a moment: the one meaning
of ``since`` everywhere (the console's list, ``--filter since=...``), so the three give the same
runs. There is no index on ``updated_at`` on purpose: it changes on every write of the hottest
table and would cost every run update its HOT path; an unfiltered listing is a scan with a
top-N sort, fine for an operator's command.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.eventlog.state import RunStatus

DEFAULT_LIMIT = 50
MAX_LIMIT = 10_000

# --- SQL -------------------------------------------------------------------------------------

LIST_RUNS = """
SELECT run_id, project_id, status, channel_type, attempt_count, max_attempts, worker_id,
       failure_code, created_at, updated_at
FROM awooop_run_state
WHERE ($1::text IS NULL OR project_id = $1)
  AND ($2::text IS NULL OR status = $2)
  AND ($3::timestamptz IS NULL OR created_at >= $3)
ORDER BY updated_at DESC, run_id
LIMIT $4
"""
RUN_PROJECT = "SELECT project_id FROM awooop_run_state WHERE run_id = $1"

# --- pure ------------------------------------------------------------------------------------

DURATION = re.compile(r"(\d{1,9})([smhd])")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
SINCE_HELP = "an ISO timestamp (2026-01-31T12:00:00Z; without a zone: UTC) or 15m, 2h, 3d, 30s"


def parse_since(text: str, now: datetime, *, field: str = "--since") -> datetime:
    """``text`` as a moment: an ISO-8601 timestamp, or a duration before ``now``; ``field``
    names where it came from in the error (the CLI flag, or the console's form field)."""
    value = text.strip()
    match = DURATION.fullmatch(value)
    if match is not None:
        return now - timedelta(**{UNITS[match.group(2)]: int(match.group(1))})
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(f"{field} {text!r}: expected {SINCE_HELP}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def check_status(text: str) -> RunStatus:
    try:
        return RunStatus(text.upper())
    except ValueError:
        known = ", ".join(s.value for s in RunStatus)
        raise InvalidInputError(f"--status {text!r}: expected one of {known}") from None


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError(f"--limit must be between 1 and {MAX_LIMIT}")
    return limit


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    run_id: uuid.UUID
    project_id: str
    status: str
    channel_type: str
    attempt_count: int
    max_attempts: int
    worker_id: str | None
    failure_code: str | None
    created_at: datetime
    updated_at: datetime


# --- I/O -------------------------------------------------------------------------------------


async def list_runs(
    conn: Connection,
    *,
    project_id: str | None = None,
    status: RunStatus | None = None,
    since: datetime | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[RunSummary]:
    rows = await conn.fetch(
        LIST_RUNS, project_id, None if status is None else status.value, since, check_limit(limit)
    )
    return [RunSummary(**dict(r.items())) for r in rows]


async def project_of(conn: Connection, run_id: uuid.UUID) -> str | None:
    """The project of ``run_id`` (on the platform role: any project), None when unknown."""
    project: str | None = await conn.fetchval(RUN_PROJECT, run_id)
    return project
