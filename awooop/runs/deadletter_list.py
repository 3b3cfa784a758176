"""The console's dead-letter list: the open dead letters of a project (or, for an admin, of
every project), newest first, one bounded page at a time.

Filters (:class:`DeadLetterFilter`): project, channel (the run's), failure code, dead-lettered
since. Rows come newest first by ``(dead_lettered_at, dead_letter_id)`` with keyset pagination
(``before``: the last row looked at, the run list's cursor text,
:func:`awooop.runs.listing.parse_cursor`). The project and ``since`` are conditions of the
index range (``awooop_dead_letters_project_open_idx`` for a project, in a tenant transaction;
``awooop_dead_letters_open_idx`` for every project, on the platform role); the code and the
channel (a join to the run) are decided per row of a batch in the statement's select list
(``sql/dead_letter_page*.sql``), so every statement reads one bounded range of an index.
Batches grow from :data:`SCAN_BATCH` up to :data:`SCAN_BATCH_MAX` until a page is full or
:data:`SCAN_LIMIT` dead letters were looked at; the page is then short and says where to go
on, as the run list does.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.eventlog import queries
from awooop.runs import listing
from awooop.runs.reads import parse_since

PAGE = 50
SCAN_BATCH = 200
SCAN_BATCH_MAX = 1000
SCAN_LIMIT = 5000
MAX_CODE = 40
# The bounds of an open range: no since, no cursor (parameters, so the statement is the same).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
LAST_ID = uuid.UUID(int=(1 << 128) - 1)

PAGE_ALL = queries.load("dead_letter_page")
PAGE_PROJECT = queries.load("dead_letter_page_project")


class DeadLetterFilter(msgspec.Struct, frozen=True, kw_only=True):
    project: str | None = None
    channel: str | None = None
    code: str | None = None
    since: datetime | None = None


class DeadLetterLine(msgspec.Struct, frozen=True, kw_only=True):
    """One open dead letter as the list shows it, with its run's channel and status."""

    dead_letter_id: uuid.UUID
    project_id: str
    run_id: uuid.UUID | None
    source: str
    group_name: str
    delivery_count: int
    event_type: str
    code: str
    reason: str
    dead_lettered_at: datetime
    channel_type: str | None
    run_status: str | None


class DeadLetterPage(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[DeadLetterLine]
    next: listing.Cursor | None  # where the next page starts; None: no more
    scanned: int


# --- pure ------------------------------------------------------------------------------------


def check_code(text: str) -> str:
    """A failure code to filter on (a catalog code such as E-RUN-004)."""
    code = text.strip().upper()
    if len(code) > MAX_CODE or not code.startswith("E-"):
        raise InvalidInputError(f"code {text[:40]!r}: expected a failure code such as E-RUN-004")
    return code


def parse_filter(fields: Mapping[str, str], now: datetime) -> DeadLetterFilter:
    """The filters of the URL; empty fields are no filter."""

    def given(name: str) -> str | None:
        value = fields.get(name, "").strip()
        return value or None

    project, channel, code, since = (given(n) for n in ("project", "channel", "code", "since"))
    return DeadLetterFilter(
        project=project,  # the caller checks it against who asks
        channel=None if channel is None else listing.check_channel(channel),
        code=None if code is None else check_code(code),
        since=None if since is None else parse_since(since, now, field="since"),
    )


def statement(f: DeadLetterFilter, cursor: listing.Cursor | None, batch: int) -> list[Any]:
    """Pure: the arguments of ``sql/dead_letter_page*.sql`` (the project's last)."""
    at, last = (LATEST, LAST_ID) if cursor is None else (cursor.created_at, cursor.run_id)
    args: list[Any] = [f.since or EARLIEST, at, last, batch, f.code, f.channel]
    return args if f.project is None else [*args, f.project]


# --- I/O -------------------------------------------------------------------------------------


async def page(
    conn: Connection,
    f: DeadLetterFilter,
    before: listing.Cursor | None = None,
    size: int = PAGE,
) -> DeadLetterPage:
    """A page of ``f`` older than ``before``, on ``conn``'s role (a tenant transaction of
    ``f.project``, or the platform role when ``f.project`` is None)."""
    sql = PAGE_ALL if f.project is None else PAGE_PROJECT
    filtered = f.code is not None or f.channel is not None
    batch = SCAN_BATCH if filtered else size
    found: list[DeadLetterLine] = []
    cursor, scanned = before, 0
    while True:
        rows = await conn.fetch(sql, *statement(f, cursor, batch))
        scanned += len(rows)
        for row in rows:
            if row["matches"]:
                found.append(msgspec.convert(dict(row.items()), DeadLetterLine, strict=False))
                if len(found) == size:
                    at = listing.Cursor(row["dead_lettered_at"], row["dead_letter_id"])
                    return DeadLetterPage(rows=found, next=at, scanned=scanned)
        if len(rows) < batch:
            return DeadLetterPage(rows=found, next=None, scanned=scanned)
        cursor = listing.Cursor(rows[-1]["dead_lettered_at"], rows[-1]["dead_letter_id"])
        if scanned >= SCAN_LIMIT:
            return DeadLetterPage(rows=found, next=cursor, scanned=scanned)
        batch = min(batch * 2, SCAN_BATCH_MAX, SCAN_LIMIT - scanned)
