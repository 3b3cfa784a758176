"""The console's run list: filters kept in the URL, newest first, one indexed page at a time.

Filters (:class:`RunFilter`): project, status, channel, ``blocked_on`` reason, created since,
and ``q``: a run id or an idempotency key (the provider's event id). Rows come newest first
by ``(created_at, run_id)`` with keyset pagination (``before``: the last row of the previous
page), so a page is a backward scan of one index of migration 0110 that stops after 50 rows,
among a million runs as among ten:

| filters                      | index                                             |
|------------------------------|---------------------------------------------------|
| none, channel, since         | ``awooop_run_state_created_idx``                  |
| project (+ channel, since)   | ``awooop_run_state_project_created_idx``          |
| project and status           | ``awooop_run_state_project_status_created_idx``   |
| status without project       | ``awooop_run_state_status_created_idx``           |
| q                            | the primary key, or ``..._provider_event_idx``    |

``created_at`` never changes, so these indexes cost a run's updates nothing. The statement is
put together from the constant fragments below (never from input: values are parameters), one
prepared statement per combination of filters, so each is planned for the filters it has
rather than one generic plan full of ``$1 IS NULL OR`` that no index serves.

A ``blocked_on`` reason narrows the statuses in SQL (each reason belongs to known statuses,
:data:`awooop.runs.blocked.REASON_STATUSES`); the reason itself depends on the clock and on
Redis, so rows are decided in batches of :data:`SCAN_BATCH` until a page is full or
:data:`SCAN_LIMIT` rows were looked at (then the page is short and says where to go on).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, LiteralString

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.log.state import RunStatus
from awooop.runs.blocked import REASON_STATUSES, BlockedOn, Reason

PAGE = 50
SCAN_BATCH = 200
SCAN_LIMIT = 5000
CHANNELS = ("telegram", "alertmanager", "gitea", "line", "api")

# --- SQL -------------------------------------------------------------------------------------
SELECT: LiteralString = """
SELECT run_id, project_id, status, channel_type, provider_event_id, attempt_count,
       max_attempts, worker_id, failure_code, created_at, updated_at
FROM awooop_run_state
"""
# Each fragment with the parameter it reads; numbered when the statement is put together.
WHERE_PROJECT: LiteralString = "project_id = $"
WHERE_STATUS: LiteralString = "status = ANY($::text[])"
WHERE_CHANNEL: LiteralString = "channel_type = $"
WHERE_SINCE: LiteralString = "created_at >= $"
WHERE_RUN_ID: LiteralString = "run_id = $"
WHERE_KEY: LiteralString = "provider_event_id = $"
WHERE_BEFORE: LiteralString = "(created_at, run_id) < ($, $)"
ORDER: LiteralString = " ORDER BY created_at DESC, run_id DESC LIMIT "
APPROVALS: LiteralString = """
SELECT name, attempt, reason, requested_at, expires_at, used_at, decision, actor
FROM awooop_approvals WHERE run_id = $1 ORDER BY requested_at
"""
# ---------------------------------------------------------------------------------------------


class RunFilter(msgspec.Struct, frozen=True, kw_only=True):
    project: str | None = None
    status: RunStatus | None = None
    channel: str | None = None
    reason: Reason | None = None
    since: datetime | None = None
    q: str | None = None


class Cursor(msgspec.Struct, frozen=True):
    created_at: datetime
    run_id: uuid.UUID

    def text(self) -> str:
        return f"{self.created_at.isoformat()}_{self.run_id}"


class RunRow(msgspec.Struct, frozen=True, kw_only=True):
    run_id: uuid.UUID
    project_id: str
    status: str
    channel_type: str
    provider_event_id: str
    attempt_count: int
    max_attempts: int
    worker_id: str | None
    failure_code: str | None
    created_at: datetime
    updated_at: datetime


class Page(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[tuple[RunRow, BlockedOn | None]]
    next: Cursor | None  # where the next page starts; None: no more rows
    scanned: int


class Approval(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    attempt: int
    reason: str
    requested_at: datetime
    expires_at: datetime
    used_at: datetime | None
    decision: str | None
    actor: str | None


# --- pure ------------------------------------------------------------------------------------


def parse_cursor(text: str) -> Cursor:
    created, _, run = text.partition("_")
    try:
        return Cursor(datetime.fromisoformat(created), uuid.UUID(run))
    except ValueError:
        raise InvalidInputError(f"before {text[:80]!r}: not a page cursor") from None


def check_channel(text: str) -> str:
    if text not in CHANNELS:
        raise InvalidInputError(f"channel {text[:40]!r}: expected one of {', '.join(CHANNELS)}")
    return text


def check_reason(text: str) -> Reason:
    try:
        return Reason(text)
    except ValueError:
        known = ", ".join(r.value for r in Reason)
        raise InvalidInputError(f"blocked_on {text[:40]!r}: expected one of {known}") from None


def statuses(f: RunFilter) -> list[str] | None:
    """The statuses the filter allows (None: any); an empty list matches nothing."""
    allowed = None if f.status is None else {f.status}
    if f.reason is not None:
        by_reason = set(REASON_STATUSES[f.reason])
        allowed = by_reason if allowed is None else allowed & by_reason
    return None if allowed is None else sorted(s.value for s in allowed)


def statement(f: RunFilter, before: bool) -> tuple[LiteralString, list[str]]:
    """Pure: the SQL for the filters present and the names of its parameters in order (see
    the module docstring). Only constant fragments go into the text."""
    parts: list[tuple[LiteralString, tuple[str, ...]]] = []
    if f.project is not None:
        parts.append((WHERE_PROJECT, ("project",)))
    if statuses(f) is not None:
        parts.append((WHERE_STATUS, ("statuses",)))
    if f.channel is not None:
        parts.append((WHERE_CHANNEL, ("channel",)))
    if f.since is not None:
        parts.append((WHERE_SINCE, ("since",)))
    if f.q is not None:
        parts.append((WHERE_RUN_ID, ("run_id",)) if _as_uuid(f.q) else (WHERE_KEY, ("q",)))
    if before:
        parts.append((WHERE_BEFORE, ("before_at", "before_id")))
    names: list[str] = []
    clauses: list[LiteralString] = []
    for fragment, params in parts:
        pieces = fragment.split("$")
        text: LiteralString = pieces[0]
        for name, rest in zip(params, pieces[1:], strict=True):
            names.append(name)
            text += _NUMBERS[len(names)] + rest
        clauses.append(text)
    names.append("limit")
    where: LiteralString = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return SELECT + where + ORDER + _NUMBERS[len(names)], names


# Parameter numbers as constant strings, so the statement stays a LiteralString.
_NUMBERS: tuple[LiteralString, ...] = tuple(
    ("$" + n) for n in ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10")
)


def _as_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


# --- I/O -------------------------------------------------------------------------------------

Decide = Callable[[Connection, list[uuid.UUID]], Awaitable[dict[uuid.UUID, BlockedOn | None]]]


async def page(
    conn: Connection,
    f: RunFilter,
    decide: Decide,
    *,
    before: Cursor | None = None,
    size: int = PAGE,
) -> Page:
    """One page of runs matching ``f`` (on ``conn``'s role: a tenant sees its project only),
    each with its ``blocked_on`` from ``decide``."""
    if statuses(f) == []:
        return Page(rows=[], next=None, scanned=0)
    rows: list[tuple[RunRow, BlockedOn | None]] = []
    scanned = 0
    cursor = before
    batch = size if f.reason is None else SCAN_BATCH
    while True:
        sql, names = statement(f, cursor is not None)
        values: dict[str, Any] = {
            "project": f.project,
            "statuses": statuses(f),
            "channel": f.channel,
            "since": f.since,
            "run_id": _as_uuid(f.q or ""),
            "q": f.q,
            "before_at": None if cursor is None else cursor.created_at,
            "before_id": None if cursor is None else cursor.run_id,
            "limit": batch,
        }
        found = [
            RunRow(**dict(r.items())) for r in await conn.fetch(sql, *(values[n] for n in names))
        ]
        scanned += len(found)
        blocked = await decide(conn, [r.run_id for r in found]) if found else {}
        for row in found:
            b = blocked.get(row.run_id)
            if f.reason is None or (b is not None and b.reason is f.reason):
                rows.append((row, b))
                if len(rows) == size:
                    return Page(rows=rows, next=Cursor(row.created_at, row.run_id), scanned=scanned)
        if len(found) < batch:
            return Page(rows=rows, next=None, scanned=scanned)
        cursor = Cursor(found[-1].created_at, found[-1].run_id)
        if scanned >= SCAN_LIMIT:
            return Page(rows=rows, next=cursor, scanned=scanned)


async def approvals_of(conn: Connection, run_id: uuid.UUID) -> list[Approval]:
    return [Approval(**dict(r.items())) for r in await conn.fetch(APPROVALS, run_id)]
