"""The run write path: append an event and apply it to ``awooop_run_state`` in one transaction.

Every generic change of a run goes through :func:`create_run`, :func:`apply_and_store` or
:func:`apply_and_store_many`; they run in the caller's transaction (which carries the tenant
setting). The row is updated to exactly ``state.apply(old, event)``, the same function the
replay tool folds, and the event is appended at the row's version, so a concurrent writer that
slipped past the row lock would still fail on the stream version. :func:`renew_leases` is the
one run-row write without an event (the lease clock, R-12). In the same transaction they
record or resolve the dead letters that the events decide
(:func:`awooop.eventlog.deadletters.follow`), open and close waits
(:func:`awooop.eventlog.waits.follow`), and resume the parents that finished children satisfy
and cancel a cancelled run's children (:func:`awooop.eventlog.child_waits.follow`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from awooop.core.db import Connection
from awooop.core.events import Event, RunCreated, run_stream_id
from awooop.eventlog import child_waits, deadletters, eventlog, queries, waits
from awooop.eventlog.state import RunState, apply, state_values

INSERT_RUN = queries.load("insert_run")
UPDATE_RUN = queries.load("update_run")
RENEW_LEASES = queries.load("renew_leases")
# The step an attempt is in and when it started (the worker's clock), as a renewal writes it.
CurrentStep = tuple[str, datetime]


async def create_run(
    conn: Connection, event: RunCreated, metadata: dict[str, Any] | None = None
) -> RunState:
    state = apply(None, event)
    await conn.execute(INSERT_RUN, *state_values(state))
    await eventlog.append(conn, run_stream_id(state.run_id), state.project_id, 0, [event], metadata)
    return state


async def apply_and_store(
    conn: Connection,
    state: RunState,
    event: Event | tuple[Event, ...],
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Apply ``event`` (or several, in order) to ``state`` (a row this transaction holds
    locked) and persist both."""
    changes, new_states = _chained(state, event)
    new_state = new_states[-1]
    await conn.execute(UPDATE_RUN, *state_values(new_state))
    await eventlog.append(
        conn,
        run_stream_id(state.run_id),
        state.project_id,
        state.version,
        [e for _, e in changes],
        metadata,
    )
    await deadletters.follow(conn, changes)
    await waits.follow(conn, changes)
    await child_waits.follow(conn, changes, new_states, apply_and_store_many, metadata)
    return new_state


async def apply_and_store_many(
    conn: Connection,
    changes: Sequence[tuple[RunState, Event | tuple[Event, ...]]],
    metadata: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
) -> list[RunState]:
    """:func:`apply_and_store` for many runs (rows this transaction holds locked, each run at
    most once, with one event or several) in two round trips: the rows in one pipelined
    ``executemany``, the events in one statement. Raises (and the transaction must roll back)
    like the single version. ``metadata``: one dict for every event, or one per change."""
    if not changes:
        return []
    flat: list[tuple[RunState, Event]] = []
    states: list[RunState] = []  # after each event of ``flat``
    metas: list[dict[str, Any] | None] = []
    finals: list[RunState] = []
    for i, (state, event) in enumerate(changes):
        run_changes, run_states = _chained(state, event)
        flat += run_changes
        states += run_states
        finals.append(run_states[-1])
        if metadata is not None and not isinstance(metadata, dict):
            metas += [metadata[i]] * len(run_changes)
    await conn.executemany(UPDATE_RUN, [state_values(s) for s in finals])
    await eventlog.append_many(
        conn,
        [(run_stream_id(old.run_id), old.project_id, old.version, event) for old, event in flat],
        metas if metadata is not None and not isinstance(metadata, dict) else metadata,
    )
    await deadletters.follow(conn, flat)
    await waits.follow(conn, flat)
    await child_waits.follow(conn, flat, states, apply_and_store_many, metadata)
    return finals


def _chained(
    state: RunState, events: Event | tuple[Event, ...]
) -> tuple[list[tuple[RunState, Event]], list[RunState]]:
    """Pure: each event with the state before it, and the state after each."""
    changes: list[tuple[RunState, Event]] = []
    after: list[RunState] = []
    for event in events if isinstance(events, tuple) else (events,):
        changes.append((state, event))
        state = apply(state, event)
        after.append(state)
    return changes, after


async def renew_leases(
    conn: Connection,
    worker_id: str,
    held: Mapping[uuid.UUID, int],
    ttl_s: float,
    steps: Mapping[uuid.UUID, CurrentStep] | None = None,
) -> set[uuid.UUID]:
    """R-12: renew the live leases of ``worker_id``'s attempts in ``held`` (run id -> the
    attempt this worker runs); return the runs renewed. A lease only moves forward, and only
    for the attempt named. Writes no event: the lease clock is the one part of the row that is
    not folded. ``steps``: the step each attempt is in now, with its start (a run missing: in
    no step), written with the lease (``current_step*``, migration 0127)."""
    if not held:
        return set()
    runs = list(held)
    now_in = [(steps or {}).get(r) for r in runs]
    rows = await conn.fetch(
        RENEW_LEASES,
        worker_id,
        runs,
        ttl_s,
        list(held.values()),
        [None if s is None else s[0] for s in now_in],
        [None if s is None else s[1] for s in now_in],
    )
    return {r["run_id"] for r in rows}
