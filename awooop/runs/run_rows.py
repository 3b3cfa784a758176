"""A run's row: read it, lock it, and record an event on it.

The writes themselves are the log room's, imported from there by every caller
(:mod:`awooop.eventlog.runs`: the row is updated to exactly ``apply(old, event)`` and the event
appended at the row's version, in the caller's transaction); this module adds the reads (the
log room's :mod:`awooop.eventlog.run_reads`) and the lock-build-write step (:func:`record`) that
most writers use.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from awooop.core.db import Connection
from awooop.core.errors import RunNotFoundError
from awooop.core.events import Event
from awooop.eventlog import run_reads
from awooop.eventlog.runs import apply_and_store
from awooop.eventlog.state import RunState, row_to_state

__all__ = ("load", "lock", "lock_if_present", "record", "version_of")


async def load(conn: Connection, run_id: uuid.UUID) -> RunState | None:
    row = await conn.fetchrow(run_reads.GET, run_id)
    return None if row is None else row_to_state(row)


async def version_of(conn: Connection, run_id: uuid.UUID) -> tuple[int, str, datetime] | None:
    """The run's version and status, and the database clock (None: no such run): what a live
    page compares before it reads the run's stream."""
    row = await conn.fetchrow(run_reads.VERSION, run_id)
    return None if row is None else (row["version"], row["status"], row["db_now"])


async def lock_if_present(conn: Connection, run_id: uuid.UUID) -> tuple[RunState, datetime] | None:
    """Lock the run's row; return its state and the database clock (None: no such run)."""
    row = await conn.fetchrow(run_reads.LOCK, run_id)
    return None if row is None else (row_to_state(row), row["db_now"])


async def lock(conn: Connection, run_id: uuid.UUID) -> tuple[RunState, datetime]:
    """Lock the run's row; return its state and the database clock."""
    found = await lock_if_present(conn, run_id)
    if found is None:
        raise RunNotFoundError(run_id=run_id)
    return found


async def record(
    conn: Connection,
    run_id: uuid.UUID,
    make_event: Callable[[RunState, datetime], Event],
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Lock the run, build the event from its state and the DB clock, apply and persist it."""
    state, now = await lock(conn, run_id)
    return await apply_and_store(conn, state, make_event(state, now), metadata)
