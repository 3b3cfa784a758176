"""The console's list of bulk operations (``awooop_operations``, :mod:`awooop.runs.bulk`): a
project's (a tenant transaction) or, for an admin, every project's and those across projects
(the platform role), newest first, one page at a time.

Keyset pagination by ``(created_at, operation_id)`` (``before``: the last row of the previous
page, the run list's cursor text, :func:`awooop.runs.listing.parse_cursor`). A project's page
reads ``awooop_operations_project_created_idx``, every project's
``awooop_operations_created_idx`` (migration 0129), one range in the index's order; a page is
at most :data:`PAGE` rows and leaves the refusals (up to 100 per operation) to the operation's
own page.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, LiteralString

import msgspec

from awooop.core.db import Connection
from awooop.runs import listing

PAGE = 50
LATEST = datetime(9999, 1, 1, tzinfo=UTC)  # no cursor: before every operation
LAST_ID = uuid.UUID(int=(1 << 128) - 1)

# --- SQL -------------------------------------------------------------------------------------
COLUMNS: LiteralString = """
SELECT operation_id, project_id, kind, filter, actor, person, via, extra_attempts, reason,
       state, expected, scanned, changed, refused, skipped, batches, created_at, updated_at,
       finished_at
FROM awooop_operations"""
ALL: LiteralString = (
    COLUMNS
    + """
WHERE (created_at, operation_id) < ($1, $2)
ORDER BY created_at DESC, operation_id DESC
LIMIT $3
"""
)
OF_PROJECT: LiteralString = (
    COLUMNS
    + """
WHERE project_id = $4 AND (created_at, operation_id) < ($1, $2)
ORDER BY created_at DESC, operation_id DESC
LIMIT $3
"""
)
# ---------------------------------------------------------------------------------------------


class OperationLine(msgspec.Struct, frozen=True, kw_only=True):
    """One bulk operation as the list shows it."""

    operation_id: uuid.UUID
    project_id: str
    kind: str
    filter: dict[str, Any]
    actor: str
    person: str
    via: str
    extra_attempts: int | None
    reason: str
    state: str
    expected: int
    scanned: int
    changed: int
    refused: int
    skipped: int
    batches: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class OperationPage(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[OperationLine]
    next: listing.Cursor | None  # where the next page starts; None: no more


async def page(
    conn: Connection,
    project_id: str | None,
    before: listing.Cursor | None = None,
    size: int = PAGE,
) -> OperationPage:
    """A page of ``project_id``'s operations (every one the role sees when None) older than
    ``before``."""
    at, last = (LATEST, LAST_ID) if before is None else (before.created_at, before.run_id)
    args: list[Any] = [at, last, size + 1]
    if project_id is None:
        rows = await conn.fetch(ALL, *args)
    else:
        rows = await conn.fetch(OF_PROJECT, *args, project_id)
    found = [msgspec.convert(dict(r.items()), OperationLine) for r in rows[:size]]
    more = len(rows) > size
    return OperationPage(
        rows=found,
        next=listing.Cursor(found[-1].created_at, found[-1].operation_id) if more else None,
    )
