"""Bulk actions by filter: retry or cancel every run a console filter matches, as one operation.

1. :func:`preview`: how many runs the filter matches for the action, per project and per
   failure code, and the first :data:`PREVIEW_ROWS` of them (a retry applies to FAILED runs
   only, a cancel to runs that have not finished: the filter is narrowed to those statuses,
   :func:`for_action`), so a person sees what the action would touch and can leave failure
   codes out (the filter's ``exclude_codes``, stored with the operation). One ``count(*) ...
   GROUP BY project_id, failure_code`` and one page through the list's indexes; with a
   ``blocked_on`` reason the candidates are decided in batches, up to :data:`PREVIEW_SCAN` of
   them (beyond that the count says "at least").
2. :func:`create`: one row of ``awooop_operations`` (migration 0111) with the filter (``since``
   absolute), the actor, the preview's count and a keyset cursor at the confirmation time:
   runs created after it are not part of the operation.
3. :func:`run_batch`, one transaction: lock the operation row (two executors of one operation
   take turns: the one that waited gets the row as the other committed it, cursor included,
   since a read-committed ``FOR UPDATE`` returns the newest version after its wait), take the
   next :data:`BATCH` runs the filter's SQL matches older than the cursor (the list's
   statement, newest first, in a snapshot taken after the lock), lock them in run_id order
   (the worker's order: no deadlock between the two), keep those that still match
   (:func:`awooop.runs.bulk_batch.matches`, and the ``blocked_on`` reason), build each run's
   event from its locked state and write them all at once
   (:func:`awooop.runs.bulk_batch.write_batch`), each event's metadata
   carrying ``actor``, ``operation_id`` and ``via``; then move the cursor past the batch and
   add to the counts.
   Because the run changes, the cursor and the counts commit together, an executor that
   dies mid-batch leaves nothing of it, and a resumed one starts after the last committed
   batch: each run is changed at most once per operation. A run whose event the state
   machine refuses is counted ``refused`` with its error (the first :data:`MAX_ERRORS` are
   kept); when Postgres refuses the batch's write, the batch is written again run by run,
   each in a savepoint, so one bad run fails only itself (counted ``refused``, its error
   kept, nothing of its change left: the savepoint takes back its row and its event).
   A refusal is the run's own: errors that say Postgres is away or two transactions got in
   each other's way (:data:`awooop.runs.bulk_batch.TRANSIENT`) are raised instead, so the whole
   batch is tried again (the transaction's retries, or the next executor) and no run is
   refused for them.
4. :func:`execute`: batches until the cursor reaches the end, then ``done`` (or until
   ``max_batches``, leaving it ``running``). Cancelled runs are announced on
   ``awooop_run_cancelled`` as a single cancel does.
5. Who executes: the process that confirmed the operation (the console's server, or the CLI).
   When that process dies, the row stays ``running`` and its ``updated_at`` stops moving;
   :func:`stalled` lists such operations (no batch for :data:`STALLED_S`) and the
   ``bulk_operations`` loop (:mod:`awooop.loops.bulk_operations`) runs their remaining batches.
   If the first executor was only slow, not dead, the two take turns (step 3).

Why a cursor and not "runs not yet carrying this operation id": the cursor is one row read,
where the other needs the event log searched per candidate; and a run the batch passed over
(refused, or no longer matching) is not looked at again. Why the rows are locked and not
``SKIP LOCKED``: a skipped run would fall behind the cursor and be missed; a run row is only
ever locked for one statement or one short transaction, so the wait is short.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Connection, Database
from awooop.core.errors import AwoooPError, InvalidInputError, OperationNotFoundError
from awooop.core.events import Event
from awooop.eventlog import run_reads
from awooop.eventlog.state import RunState, apply, row_to_state
from awooop.runs import control, listing
from awooop.runs.bulk_batch import event_for, matches, refusal, write_batch
from awooop.runs.bulk_preview import (
    KINDS,
    Preview,
    check_bounded,
    check_kind,
    for_action,
    preview,
)

# The preview and the action's narrowing live in bulk_preview; callers use them from here.
__all__ = ["KINDS", "Preview", "check_bounded", "check_kind", "for_action", "preview"]

BATCH = 100
MAX_ERRORS = 100
# An operation across projects belongs to the platform project (as admin tokens do).
LAST_ID = uuid.UUID(int=(1 << 128) - 1)  # the cursor's start: after every run id
# A running operation with no batch for this long has lost its executor (a batch of 100 runs
# takes well under a second): the console offers a resume and the bulk_operations loop
# resumes it. Taking it over early is safe (executors take turns), only wasted work.
STALLED_S = 30.0

# --- SQL -------------------------------------------------------------------------------------
INSERT = """
INSERT INTO awooop_operations (operation_id, project_id, kind, filter, actor, person, via,
                               extra_attempts, reason, expected, cursor_at, cursor_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now(), $11)
RETURNING *
"""
SELECT = "SELECT * FROM awooop_operations WHERE operation_id = $1"
LOCK = "SELECT * FROM awooop_operations WHERE operation_id = $1 FOR UPDATE"
ADVANCE = """
UPDATE awooop_operations
SET cursor_at = $2, cursor_id = $3, scanned = scanned + $4, changed = changed + $5,
    refused = refused + $6, skipped = skipped + $7, batches = batches + 1,
    errors = CASE WHEN jsonb_array_length(errors) >= $9 THEN errors
                  ELSE errors || $8::jsonb END,
    updated_at = now()
WHERE operation_id = $1
RETURNING *
"""
FINISH = """
UPDATE awooop_operations SET state = 'done', finished_at = now(), updated_at = now()
WHERE operation_id = $1 RETURNING *
"""
RECENT = """
SELECT * FROM awooop_operations WHERE ($1::text IS NULL OR project_id = $1)
ORDER BY created_at DESC LIMIT $2
"""
# Running operations with no batch for $1 seconds, and those named in $2 (the caller's own,
# whose updated_at it moved itself). A scan of the table: it holds one row per operation a
# person confirmed, and only the few running ones pass the first test.
STALLED = """
SELECT * FROM awooop_operations
WHERE state = 'running'
  AND (updated_at < now() - make_interval(secs => $1) OR operation_id = ANY($2::uuid[]))
ORDER BY updated_at
LIMIT $3
"""
NOTIFY_MANY = "SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id"
# ---------------------------------------------------------------------------------------------


class Operation(msgspec.Struct, frozen=True, kw_only=True):
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
    cursor_at: datetime
    cursor_id: uuid.UUID
    scanned: int
    changed: int
    refused: int
    skipped: int
    batches: int
    errors: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    def run_filter(self) -> listing.RunFilter:
        return for_action(self.kind, msgspec.convert(self.filter, listing.RunFilter))


Decide = listing.Decide
Progress = Callable[[Operation], Awaitable[None] | None]


# --- pure ------------------------------------------------------------------------------------


def filter_json(f: listing.RunFilter) -> dict[str, Any]:
    """Pure: the filter as stored (without the action's narrowing, which the kind gives)."""
    stored: dict[str, Any] = msgspec.to_builtins(msgspec.structs.replace(f, among=None))
    return {k: v for k, v in stored.items() if v is not None}


def scope_of(f: listing.RunFilter) -> str:
    """The project an operation belongs to: the filter's, or the platform project."""
    return f.project or PLATFORM_PROJECT


def _operation(row: Any) -> Operation:
    return msgspec.convert(dict(row.items()), Operation)


# --- I/O -------------------------------------------------------------------------------------


async def create(
    conn: Connection,
    kind: str,
    f: listing.RunFilter,
    *,
    actor: str,
    via: str,
    expected: int,
    person: str | None = None,
    extra_attempts: int = 3,
    reason: str = "",
) -> Operation:
    """Record the operation (on a transaction of :func:`scope_of` ``f``); nothing changes yet."""
    check_kind(kind)
    control.check_text("actor", person or actor, 200)
    control.check_text("reason", reason, control.MAX_REASON)
    if not 1 <= extra_attempts <= control.MAX_EXTRA_ATTEMPTS:
        raise InvalidInputError(
            f"extra attempts must be between 1 and {control.MAX_EXTRA_ATTEMPTS}"
        )
    row = await conn.fetchrow(
        INSERT,
        uuid.uuid4(),
        scope_of(f),
        kind,
        filter_json(f),
        actor,
        person or actor,
        via,
        extra_attempts if kind == "retry" else None,
        reason,
        expected,
        LAST_ID,
    )
    return _operation(row)


async def get(conn: Connection, operation_id: uuid.UUID) -> Operation:
    row = await conn.fetchrow(SELECT, operation_id)
    if row is None:
        raise OperationNotFoundError(operation_id=operation_id)
    return _operation(row)


async def recent(conn: Connection, project_id: str | None, limit: int = 20) -> list[Operation]:
    return [_operation(r) for r in await conn.fetch(RECENT, project_id, limit)]


async def stalled(
    conn: Connection,
    older_than_s: float = STALLED_S,
    also: Sequence[uuid.UUID] = (),
    limit: int = 100,
) -> list[Operation]:
    """Running operations not advanced for ``older_than_s`` (their executor is gone), and the
    running ones among ``also``; oldest first. Across projects: the platform role reads it."""
    rows = await conn.fetch(STALLED, older_than_s, list(also), limit)
    return [_operation(r) for r in rows]


async def run_batch(
    conn: Connection, operation_id: uuid.UUID, decide: Decide | None = None, size: int = BATCH
) -> Operation:
    """One batch of the operation (see the module docstring); the operation after it."""
    row = await conn.fetchrow(LOCK, operation_id)
    if row is None:
        raise OperationNotFoundError(operation_id=operation_id)
    op = _operation(row)
    if op.state != "running":
        return op
    f = op.run_filter()
    cursor = listing.Cursor(op.cursor_at, op.cursor_id)
    candidates = await listing.rows(conn, f, cursor, size)
    if not candidates:
        return _operation(await conn.fetchrow(FINISH, operation_id))
    locked = [
        (row_to_state(r), r["db_now"])
        for r in await conn.fetch(run_reads.LOCK_MANY, [c.run_id for c in candidates])
    ]
    still = [(s, now) for s, now in locked if matches(f, s)]
    if f.reason is not None and decide is not None and still:
        blocked = await decide(conn, [s.run_id for s, _ in still])
        still = [
            (s, now)
            for s, now in still
            if (b := blocked.get(s.run_id)) is not None and b.reason is f.reason
        ]
    changes: list[tuple[RunState, Event]] = []
    errors: list[dict[str, Any]] = []
    for state, now in still:
        event = event_for(
            op.kind, op.person, state, now, extra_attempts=op.extra_attempts, reason=op.reason
        )
        try:
            apply(state, event)  # the state machine's answer before anything is written
        except AwoooPError as exc:
            errors.append(refusal(state.run_id, exc))
            continue
        changes.append((state, event))
    metadata = {"actor": op.actor, "operation_id": str(op.operation_id), "via": op.via}
    written, failed = await write_batch(conn, changes, metadata) if changes else ([], [])
    errors += failed
    if op.kind == "cancel" and written:
        await conn.execute(NOTIFY_MANY, control.CANCEL_CHANNEL, [str(s.run_id) for s in written])
    last = candidates[-1]
    row = await conn.fetchrow(
        ADVANCE,
        operation_id,
        last.created_at,
        last.run_id,
        len(candidates),
        len(written),
        len(errors),
        len(locked) - len(still) + (len(candidates) - len(locked)),
        errors,
        MAX_ERRORS,
    )
    return _operation(row)


async def in_scope(
    db: Database, project_id: str, fn: Callable[[Connection], Awaitable[Any]]
) -> Any:
    """``fn`` in a transaction of the operation's project (the platform role for one across
    projects, whose batches must see every project's runs)."""
    if project_id == PLATFORM_PROJECT:
        return await db.in_platform_writes(fn)
    return await db.in_tenant(project_id, fn)


async def execute(
    db: Database,
    project_id: str,
    operation_id: uuid.UUID,
    decide: Decide | None = None,
    progress: Progress | None = None,
    size: int = BATCH,
    max_batches: int | None = None,
) -> Operation:
    """Batches until the operation is done (also to resume one), or ``max_batches`` of them
    (the operation is then still ``running``); ``progress`` after each."""
    batches = 0
    while True:
        op: Operation = await in_scope(
            db, project_id, lambda conn: run_batch(conn, operation_id, decide, size)
        )
        batches += 1
        if progress is not None:
            shown = progress(op)
            if shown is not None:
                await shown
        if op.state != "running" or (max_batches is not None and batches >= max_batches):
            return op
