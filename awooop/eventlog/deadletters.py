"""Dead letters in Postgres (R-16, R-19): the messages the runtime gave up delivering.

Postgres is the truth; Redis keeps no dead-letter stream. One row per occurrence
(``awooop_dead_letters``, migration 0119), written by :func:`record`, the one function that
records a dead letter:

- a run's dead letter follows its ``RunFailed`` marked ``dead_letter`` (the reaper's last
  expired attempt, a worker giving up on a message delivered too often): :func:`follow`, called
  by the run write path (:mod:`awooop.eventlog.runs`) in the transaction that appends the event, so
  the row exists exactly when the event does, and ``run_version`` (the event's version) makes a
  repeat of the same occurrence insert nothing;
- a message that no consumer could decode has no run: it is recorded under the platform project
  (:data:`PLATFORM_PROJECT`) and keyed by its group and entry id.

A dead letter is resolved, never deleted: ``redriven`` or ``discarded`` by a re-drive
(:mod:`awooop.runs.deadletters`), or ``retried`` by any later ``RunRetried`` of its run
(:func:`follow` again: ``awooop runs retry``, a bulk retry, the console). So a run has at most
one open dead letter, and a successful retry never leaves one open.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.core import metrics
from awooop.core.db import Connection
from awooop.core.events import Event, RunFailed, RunRetried
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.eventlog.state import RunState

log = get_logger(__name__)

RECORD = queries.load("dead_letter_record")
NOTE_DELIVERY = queries.load("dead_letter_note_delivery")
RESOLVE = queries.load("dead_letter_resolve")
RESOLVE_RUNS = queries.load("dead_letter_resolve_runs")
LIST_OPEN = queries.load("dead_letter_list")
OF_RUNS = queries.load("dead_letter_of_runs")
GET = queries.load("dead_letter_get")
GET_FOR_UPDATE = queries.load("dead_letter_lock")
OPEN_COUNTS = queries.load("dead_letter_open_counts")

WORK = "work"  # the shard's work stream
EVENTS = "events"  # the shard's events stream
REDRIVEN = "redriven"
DISCARDED = "discarded"
RETRIED = "retried"


class DeadLetterRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What is known when a message is dead-lettered (the columns :func:`record` writes)."""

    project_id: str
    run_id: uuid.UUID | None = None
    run_version: int | None = None  # the RunFailed's version in run-<run_id>
    source: str  # WORK or EVENTS
    group_name: str = ""  # the consumer group that gave up ("" when the attempts did)
    source_entry_id: str = ""
    delivery_count: int = 0
    event_type: str = ""
    code: str = ""
    reason: str
    message: bytes | None = None  # the envelope bytes a consumer had (or could not decode)


class DeadLetterRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``awooop_dead_letters``."""

    dead_letter_id: uuid.UUID
    project_id: str
    run_id: uuid.UUID | None
    run_version: int | None
    source: str
    group_name: str
    source_entry_id: str
    delivery_count: int
    event_type: str
    code: str
    reason: str
    message: bytes | None
    dead_lettered_at: datetime
    resolved_at: datetime | None
    resolution: str | None
    resolved_by: str | None


def row_of(record: Any) -> DeadLetterRow:
    return DeadLetterRow(**dict(record))


# --- pure ------------------------------------------------------------------------------------


def record_of_failure(state: RunState, event: RunFailed) -> DeadLetterRecord:
    """The dead letter a ``RunFailed`` marked ``dead_letter`` stands for; ``state`` is the run
    before the event (the event is appended at ``state.version + 1``)."""
    return DeadLetterRecord(
        project_id=state.project_id,
        run_id=state.run_id,
        run_version=state.version + 1,
        source=WORK,
        event_type="RunFailed",
        code=event.code,
        reason=event.reason,
    )


# --- writes ----------------------------------------------------------------------------------


async def record(conn: Connection, dead: DeadLetterRecord) -> uuid.UUID | None:
    """Record ``dead`` (in the caller's transaction); None when this occurrence (or an open
    dead letter of the same run or entry) is recorded already."""
    found = await conn.fetchval(
        RECORD,
        dead.project_id,
        dead.run_id,
        dead.run_version,
        dead.source,
        dead.group_name,
        dead.source_entry_id,
        dead.delivery_count,
        dead.event_type,
        dead.code,
        dead.reason,
        dead.message,
    )
    if found is None:
        return None
    metrics.DEAD_LETTERS.inc()
    log.warning(
        "dead_letter_recorded",
        dead_letter_id=str(found),
        project_id=dead.project_id,
        run_id=None if dead.run_id is None else str(dead.run_id),
        source=dead.source,
        group=dead.group_name,
        delivery_count=dead.delivery_count,
        reason=dead.reason,
    )
    dead_id: uuid.UUID = found
    return dead_id


async def follow(conn: Connection, changes: Sequence[tuple[RunState, Event]]) -> None:
    """The dead letters that run events decide, in the transaction appending them: a
    ``RunFailed`` marked ``dead_letter`` records one, a ``RunRetried`` resolves its run's open
    one. Other events cost nothing."""
    retried: dict[str | None, list[uuid.UUID]] = {}
    for state, event in changes:
        if isinstance(event, RunFailed) and event.dead_letter:
            await record(conn, record_of_failure(state, event))
        elif isinstance(event, RunRetried):
            retried.setdefault(event.actor, []).append(state.run_id)
    for actor, runs in retried.items():
        await resolve_runs(conn, runs, RETRIED, actor)


async def note_delivery(
    conn: Connection,
    run_id: uuid.UUID,
    *,
    group_name: str,
    source_entry_id: str,
    delivery_count: int,
    event_type: str,
    message: bytes | None,
) -> None:
    """Add what the consumer that gave up knew to the open dead letter of ``run_id``."""
    await conn.execute(
        NOTE_DELIVERY,
        run_id,
        group_name,
        source_entry_id,
        delivery_count,
        event_type,
        message,
    )


async def resolve_runs(
    conn: Connection, run_ids: Sequence[uuid.UUID], resolution: str, actor: str | None
) -> int:
    """Resolve the open dead letters of ``run_ids``; how many were open."""
    if not run_ids:
        return 0
    return len(await conn.fetch(RESOLVE_RUNS, list(run_ids), resolution, actor))


async def resolve(
    conn: Connection, dead_letter_id: uuid.UUID, resolution: str, actor: str | None
) -> bool:
    """Resolve one open dead letter; False when it is resolved already (or not visible)."""
    return await conn.fetchval(RESOLVE, dead_letter_id, resolution, actor) is not None


# --- reads -----------------------------------------------------------------------------------


async def list_open(
    conn: Connection,
    project_id: str | None = None,
    limit: int = 100,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[DeadLetterRow]:
    """Open dead letters the connection's role sees (of ``project_id`` only, if given), newest
    first, after the keyset ``after`` (the last row of the previous page)."""
    at, last = after if after is not None else (None, None)
    rows = await conn.fetch(LIST_OPEN, project_id, at, last, limit)
    return [row_of(r) for r in rows]


async def open_of_runs(conn: Connection, run_ids: Sequence[uuid.UUID]) -> list[DeadLetterRow]:
    """The open dead letters of ``run_ids`` the connection's role sees: at most one each."""
    if not run_ids:
        return []
    return [row_of(r) for r in await conn.fetch(OF_RUNS, list(run_ids))]


async def get(conn: Connection, dead_letter_id: uuid.UUID) -> DeadLetterRow | None:
    """One dead letter; None when not visible."""
    found = await conn.fetchrow(GET, dead_letter_id)
    return None if found is None else row_of(found)


async def get_for_update(conn: Connection, dead_letter_id: uuid.UUID) -> DeadLetterRow | None:
    """One dead letter, locked for the rest of the transaction; None when not visible."""
    found = await conn.fetchrow(GET_FOR_UPDATE, dead_letter_id)
    return None if found is None else row_of(found)


async def open_counts(conn: Connection) -> dict[str, int]:
    """Open dead letters per project (every project the role sees)."""
    return {r["project_id"]: int(r["open"]) for r in await conn.fetch(OPEN_COUNTS)}
