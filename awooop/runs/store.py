"""The run write path: append an event and apply it to ``awooop_run_state`` in one transaction.

Every change of a run goes through :func:`create_run` or :func:`apply_and_store`; both run in
the caller's transaction (which carries the tenant setting). The row is updated to exactly
``state.apply(old, event)``, the same function the replay tool folds, and the event is
appended at the row's version, so a concurrent writer that slipped past the row lock would
still fail on the stream version.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import RunNotFoundError
from awooop.core.events import Event, RunCreated, run_stream_id
from awooop.log import eventlog
from awooop.runs.state import COLUMNS, RunState, apply

# --- SQL (column lists come from RunState's fields, the single description of the row) ------

_COLUMN_LIST = ", ".join(COLUMNS)
INSERT_RUN = (
    f"INSERT INTO awooop_run_state ({_COLUMN_LIST}) "  # noqa: S608 - constant column names
    f"VALUES ({', '.join(f'${i + 1}' for i in range(len(COLUMNS)))})"
)
UPDATE_RUN = (
    "UPDATE awooop_run_state SET "  # noqa: S608 - constant column names
    + ", ".join(f"{c} = ${i + 1}" for i, c in enumerate(COLUMNS) if c != "run_id")
    + f" WHERE run_id = ${COLUMNS.index('run_id') + 1}"
)
SELECT_RUN = f"SELECT {_COLUMN_LIST} FROM awooop_run_state WHERE run_id = $1"  # noqa: S608
LOCK_RUN = (
    f"SELECT {_COLUMN_LIST}, now() AS db_now FROM awooop_run_state "  # noqa: S608
    "WHERE run_id = $1 FOR UPDATE"
)


def row_to_state(row: Any) -> RunState:
    return msgspec.convert({c: row[c] for c in COLUMNS}, RunState, strict=False)


def state_values(state: RunState) -> tuple[Any, ...]:
    return msgspec.structs.astuple(state)


async def create_run(
    conn: Connection, event: RunCreated, metadata: dict[str, Any] | None = None
) -> RunState:
    state = apply(None, event)
    await conn.execute(INSERT_RUN, *state_values(state))
    await eventlog.append(conn, run_stream_id(state.run_id), state.project_id, 0, [event], metadata)
    return state


async def apply_and_store(
    conn: Connection, state: RunState, event: Event, metadata: dict[str, Any] | None = None
) -> RunState:
    """Apply ``event`` to ``state`` (a row this transaction holds locked) and persist both."""
    new_state = apply(state, event)
    await conn.execute(UPDATE_RUN, *state_values(new_state))
    await eventlog.append(
        conn, run_stream_id(state.run_id), state.project_id, state.version, [event], metadata
    )
    return new_state


async def load(conn: Connection, run_id: uuid.UUID) -> RunState | None:
    row = await conn.fetchrow(SELECT_RUN, run_id)
    return None if row is None else row_to_state(row)


async def lock(conn: Connection, run_id: uuid.UUID) -> tuple[RunState, datetime]:
    """Lock the run's row; return its state and the database clock."""
    row = await conn.fetchrow(LOCK_RUN, run_id)
    if row is None:
        raise RunNotFoundError(run_id=run_id)
    return row_to_state(row), row["db_now"]


async def record(
    conn: Connection,
    run_id: uuid.UUID,
    make_event: Callable[[RunState, datetime], Event],
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Lock the run, build the event from its state and the DB clock, apply and persist it."""
    state, now = await lock(conn, run_id)
    return await apply_and_store(conn, state, make_event(state, now), metadata)


async def apply_and_store_many(
    conn: Connection,
    changes: Sequence[tuple[RunState, Event]],
    metadata: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
) -> list[RunState]:
    """:func:`apply_and_store` for many runs (rows this transaction holds locked, each run at
    most once) in two round trips: the rows in one pipelined ``executemany``, the events in
    one statement. Raises (and the transaction must roll back) like the single version.
    ``metadata``: one dict for every event, or one per change."""
    if not changes:
        return []
    new_states = [apply(state, event) for state, event in changes]
    await conn.executemany(UPDATE_RUN, [state_values(s) for s in new_states])
    await eventlog.append_many(
        conn,
        [(run_stream_id(old.run_id), old.project_id, old.version, event) for old, event in changes],
        metadata,
    )
    return new_states
