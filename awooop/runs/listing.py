"""The console's run list: filters kept in the URL, newest first, one indexed page at a time.

Filters (:class:`RunFilter`): project, status, channel, ``blocked_on`` reason, created since,
``q``: a run id or an idempotency key (the provider's event id), ``search``: the start of a run
id or key, or text in the input, result or failure reason (:mod:`awooop.runs.search`: at most a
bounded set of run ids, read here by primary key), and ``exclude_codes``: failure codes left
out (a bulk retry that must not touch runs failing one way). Rows come newest first
by ``(created_at, run_id)`` with keyset pagination (``before``: the last row of the previous
page). A page is read one status at a time: the statement unnests the statuses the filter
allows (all eight without one) and, for each, takes at most a page of rows from a backward
scan of an index that starts with the status (a loose index scan written out with LATERAL),
then keeps the newest page of those few hundred rows. So two indexes of migration 0110 serve
every filter, among a million runs as among ten:

| filters                                  | index                                           |
|------------------------------------------|-------------------------------------------------|
| none, status, channel, since, blocked_on | ``awooop_run_state_status_created_idx``         |
| project (+ any of the above)             | ``awooop_run_state_project_status_created_idx`` |
| q                                        | the primary key, or ``..._provider_event_idx``  |
| search (+ any of the above)              | the primary key (the ids the search found)      |

Each status is a separate descent, so a page costs at most eight short index scans whatever
the mix of statuses (a single index on ``created_at`` would serve the unfiltered list alone,
and every index is one more entry written on every run update: statuses change, so run
updates are not HOT). The statement is put together from the constant fragments below (never
from input: values are parameters), one prepared statement per combination of filters, so
each is planned for the filters it has rather than one generic plan full of ``$1 IS NULL OR``
that no index serves. :func:`count_statement` counts the same filter per project (the bulk
actions' preview, :mod:`awooop.runs.bulk`) through the same indexes.

A ``blocked_on`` reason narrows the statuses in SQL (each reason belongs to known statuses,
:data:`awooop.runs.blocked.REASON_STATUSES`), and the two FAILED reasons the failure codes too
(a FAILED run's reason is its code's, :func:`awooop.runs.blocked.failed_reason`: without this a
filter on the rarer of the two decided every FAILED run up to the scan limit, 5,000 runs a
page, 400 ms among 100,000 runs). Other reasons depend on the clock and on Redis, so rows are
decided in batches (:data:`SCAN_BATCH` first, each next one twice as large up to
:data:`SCAN_BATCH_MAX`) until a page is full or :data:`SCAN_LIMIT` rows were looked at (then
the page is short and says where to go on).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, LiteralString

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.eventlog.state import RunStatus
from awooop.runs.blocked import DEAD_LETTER_CODES, REASON_STATUSES, BlockedOn, Reason
from awooop.runs.reads import check_status, parse_since
from awooop.runs.search import Found, check_codes, check_search, find

PAGE = 50
SCAN_BATCH = 200  # the first batch of a blocked_on filter; each next one twice as large
SCAN_BATCH_MAX = 1000
SCAN_LIMIT = 5000
CHANNELS = ("telegram", "alertmanager", "gitea", "line", "api")

# --- SQL -------------------------------------------------------------------------------------
# Per status (the unnested $): the newest rows of that status, then the newest of them all.
PER_STATUS: LiteralString = """
SELECT r.* FROM unnest($::text[]) AS s(status) CROSS JOIN LATERAL (
    SELECT rs.run_id, rs.project_id, rs.status, rs.channel_type, rs.provider_event_id,
           rs.attempt_count, rs.max_attempts, rs.worker_id, rs.failure_code, rs.created_at,
           rs.updated_at
    FROM awooop_run_state rs WHERE rs.status = s.status"""
PER_STATUS_END: LiteralString = ") r"
DIRECT: LiteralString = """
SELECT rs.run_id, rs.project_id, rs.status, rs.channel_type, rs.provider_event_id,
       rs.attempt_count, rs.max_attempts, rs.worker_id, rs.failure_code, rs.created_at,
       rs.updated_at
FROM awooop_run_state rs"""
COUNT: LiteralString = "SELECT project_id, failure_code, count(*) AS runs FROM awooop_run_state rs"
COUNT_END: LiteralString = " GROUP BY project_id, failure_code ORDER BY project_id, failure_code"
# Each fragment with the parameter it reads; numbered when the statement is put together.
WHERE_PROJECT: LiteralString = "rs.project_id = $"
WHERE_STATUS: LiteralString = "rs.status = ANY($::text[])"
WHERE_CHANNEL: LiteralString = "rs.channel_type = $"
WHERE_SINCE: LiteralString = "rs.created_at >= $"
WHERE_RUN_ID: LiteralString = "rs.run_id = $"
WHERE_KEY: LiteralString = "rs.provider_event_id = $"
WHERE_FOUND: LiteralString = "rs.run_id = ANY($::uuid[])"
WHERE_BEFORE: LiteralString = "(rs.created_at, rs.run_id) < ($, $)"
# A FAILED run's reason is its failure code's (blocked.failed_reason): decided in SQL.
WHERE_DEAD_LETTER_CODE: LiteralString = "rs.failure_code = ANY($::text[])"
WHERE_OTHER_CODE: LiteralString = "(rs.failure_code IS NULL OR rs.failure_code <> ALL($::text[]))"
INNER_ORDER: LiteralString = " ORDER BY rs.created_at DESC, rs.run_id DESC LIMIT "
ORDER: LiteralString = " ORDER BY created_at DESC, run_id DESC LIMIT "
APPROVALS: LiteralString = """
SELECT name, attempt, reason, requested_at, expires_at, used_at, decision, actor, decided_by
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
    search: str | None = None
    exclude_codes: tuple[str, ...] | None = None
    # The statuses an action applies to (a bulk retry: FAILED only); None: any.
    among: frozenset[RunStatus] | None = None


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
    capped: bool = False  # the search found more runs than it looks at (search.LIMIT)


class Approval(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    attempt: int
    reason: str
    requested_at: datetime
    expires_at: datetime
    used_at: datetime | None
    decision: str | None
    actor: str | None
    decided_by: str | None = None  # the person, for a decision without the approval token


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


FILTER_KEYS = (
    "project",
    "status",
    "channel",
    "blocked_on",
    "since",
    "q",
    "search",
    "exclude_codes",
)


def parse_filter(fields: Mapping[str, str], now: datetime) -> RunFilter:
    """Pure: a filter from its URL or command-line fields (:data:`FILTER_KEYS`; empty values
    are no filter, other keys are ignored); ``since`` made absolute against ``now``."""

    def get(name: str) -> str | None:
        value = fields.get(name, "").strip()
        return value or None

    since, status, channel = get("since"), get("status"), get("channel")
    reason, text, project = get("blocked_on"), get("q"), get("project")
    term, codes = get("search"), get("exclude_codes")
    return RunFilter(
        project=project,  # the caller checks it against who asks
        status=None if status is None else check_status(status),
        channel=None if channel is None else check_channel(channel),
        reason=None if reason is None else check_reason(reason),
        since=None if since is None else parse_since(since, now, field="since"),
        q=None if text is None else text[:256],
        search=None if term is None else check_search(term),
        exclude_codes=(check_codes(codes) or None) if codes is not None else None,
    )


def statuses(f: RunFilter) -> list[str] | None:
    """The statuses the filter allows (None: any); an empty list matches nothing."""
    allowed = None if f.status is None else {f.status}
    if f.among is not None:
        allowed = set(f.among) if allowed is None else allowed & f.among
    if f.reason is not None:
        by_reason = set(REASON_STATUSES[f.reason])
        allowed = by_reason if allowed is None else allowed & by_reason
    return None if allowed is None else sorted(s.value for s in allowed)


def _conditions(
    f: RunFilter, before: bool, *, by_status: bool
) -> list[tuple[LiteralString, tuple[str, ...]]]:
    parts: list[tuple[LiteralString, tuple[str, ...]]] = []
    if f.project is not None:
        parts.append((WHERE_PROJECT, ("project",)))
    if not by_status and statuses(f) is not None:
        parts.append((WHERE_STATUS, ("statuses",)))
    if f.channel is not None:
        parts.append((WHERE_CHANNEL, ("channel",)))
    if f.since is not None:
        parts.append((WHERE_SINCE, ("since",)))
    if f.q is not None:
        parts.append((WHERE_RUN_ID, ("run_id",)) if _as_uuid(f.q) else (WHERE_KEY, ("q",)))
    if f.search is not None:
        parts.append((WHERE_FOUND, ("found",)))
    if f.exclude_codes:
        parts.append((WHERE_OTHER_CODE, ("exclude_codes",)))
    if f.reason is Reason.FAILED_DEAD_LETTERED:
        parts.append((WHERE_DEAD_LETTER_CODE, ("dead_letter_codes",)))
    elif f.reason is Reason.FAILED:
        parts.append((WHERE_OTHER_CODE, ("dead_letter_codes",)))
    if before:
        parts.append((WHERE_BEFORE, ("before_at", "before_id")))
    return parts


def _number(
    parts: list[tuple[LiteralString, tuple[str, ...]]], names: list[str]
) -> list[LiteralString]:
    """Each fragment with its ``$`` numbered after ``names`` (extended in place)."""
    clauses: list[LiteralString] = []
    for fragment, params in parts:
        pieces = fragment.split("$")
        text: LiteralString = pieces[0]
        for name, rest in zip(params, pieces[1:], strict=True):
            names.append(name)
            text += _NUMBERS[len(names)] + rest
        clauses.append(text)
    return clauses


def statement(f: RunFilter, before: bool) -> tuple[LiteralString, list[str]]:
    """Pure: the SQL of a page for the filters present and the names of its parameters in
    order (see the module docstring). Only constant fragments go into the text."""
    names: list[str] = []
    if f.q is not None or f.search is not None:  # a few runs: no need to walk the statuses
        clauses = _number(_conditions(f, before, by_status=False), names)
        names.append("limit")
        where: LiteralString = " WHERE " + " AND ".join(clauses)
        return DIRECT + where + ORDER + _NUMBERS[len(names)], names
    names.append("all_statuses")
    head: LiteralString = PER_STATUS.replace("$", _NUMBERS[1])
    clauses = _number(_conditions(f, before, by_status=True), names)
    names.append("limit")
    limit = _NUMBERS[len(names)]
    inner: LiteralString = "".join(" AND " + c for c in clauses)
    sql = head + inner + INNER_ORDER + limit + PER_STATUS_END + ORDER + limit
    return sql, names


def count_statement(f: RunFilter) -> tuple[LiteralString, list[str]]:
    """Pure: runs matching ``f`` per project and failure code (the bulk preview), with its
    parameter names."""
    names: list[str] = []
    clauses = _number(_conditions(f, False, by_status=False), names)
    where: LiteralString = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return COUNT + where + COUNT_END, names


def values(
    f: RunFilter, before: Cursor | None, limit: int, found: Found | None = None
) -> dict[str, Any]:
    """The parameters :func:`statement` and :func:`count_statement` name (``found``: what
    the filter's search found)."""
    allowed = statuses(f)
    return {
        "all_statuses": [s.value for s in RunStatus] if allowed is None else allowed,
        "project": f.project,
        "statuses": allowed,
        "channel": f.channel,
        "since": f.since,
        "run_id": _as_uuid(f.q or ""),
        "q": f.q,
        "before_at": None if before is None else before.created_at,
        "before_id": None if before is None else before.run_id,
        "limit": limit,
        "dead_letter_codes": sorted(DEAD_LETTER_CODES),
        "found": [] if found is None else found.run_ids,
        "exclude_codes": list(f.exclude_codes or ()),
    }


async def searched(conn: Connection, f: RunFilter) -> Found | None:
    """What the filter's search finds (None: no search)."""
    return None if f.search is None else await find(conn, f.search, f.project, statuses(f))


async def rows(
    conn: Connection, f: RunFilter, before: Cursor | None, limit: int, found: Found | None = None
) -> list[RunRow]:
    """At most ``limit`` rows matching ``f`` (statuses and SQL filters; not the reason),
    newest first, older than ``before``; ``found``: the search's runs when already known."""
    if statuses(f) == []:
        return []
    if found is None:
        found = await searched(conn, f)
    sql, names = statement(f, before is not None)
    given = values(f, before, limit, found)
    return [RunRow(**dict(r.items())) for r in await conn.fetch(sql, *(given[n] for n in names))]


# Parameter numbers as constant strings, so the statement stays a LiteralString.
_NUMBERS: tuple[LiteralString, ...] = tuple(
    ("$" + n) for n in ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13")
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
    found_rows: list[tuple[RunRow, BlockedOn | None]] = []
    found = await searched(conn, f)
    capped = found is not None and found.capped
    scanned = 0
    cursor = before
    batch = size if f.reason is None else SCAN_BATCH
    while True:
        batch_rows = await rows(conn, f, cursor, batch, found)
        scanned += len(batch_rows)
        blocked = await decide(conn, [r.run_id for r in batch_rows]) if batch_rows else {}
        for row in batch_rows:
            b = blocked.get(row.run_id)
            if f.reason is None or (b is not None and b.reason is f.reason):
                found_rows.append((row, b))
                if len(found_rows) == size:
                    return Page(
                        rows=found_rows,
                        next=Cursor(row.created_at, row.run_id),
                        scanned=scanned,
                        capped=capped,
                    )
        if len(batch_rows) < batch:
            return Page(rows=found_rows, next=None, scanned=scanned, capped=capped)
        cursor = Cursor(batch_rows[-1].created_at, batch_rows[-1].run_id)
        if scanned >= SCAN_LIMIT:
            return Page(rows=found_rows, next=cursor, scanned=scanned, capped=capped)
        # A filter that matches little: fewer, larger batches (each costs a statement, the
        # facts query and a look at Redis), never past the scan limit.
        batch = min(batch * 2, SCAN_BATCH_MAX, SCAN_LIMIT - scanned)


async def approvals_of(conn: Connection, run_id: uuid.UUID) -> list[Approval]:
    return [Approval(**dict(r.items())) for r in await conn.fetch(APPROVALS, run_id)]
