"""The open waits of runs (``awooop_run_waits``, migration 0141), kept equal to the log: a row is
written in the transaction of the ``WaitStarted`` that begins the wait and removed in the
transaction of the event that takes the run out of WAITING_EVENT (``TimerFired``,
``SignalDelivered``, ``RunCancelled``), by :func:`follow`, which the run write path
(:mod:`awooop.eventlog.runs`) calls for every change it stores. So no row outlives its wait,
whichever path ends it, and a run holds at most one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import msgspec

from awooop.core.db import Connection
from awooop.core.events import Event, WaitStarted
from awooop.eventlog import queries
from awooop.eventlog.state import RunState, RunStatus

OPEN = queries.load("waits_open")
CLOSE = queries.load("waits_close")


async def follow(conn: Connection, changes: Sequence[tuple[RunState, Event]]) -> None:
    """Open and close the waits that ``changes`` (states before their events) begin and end."""
    closed = [old.run_id for old, _ in changes if old.status is RunStatus.WAITING_EVENT]
    if closed:
        await conn.execute(CLOSE, closed)
    opened = [(old, e) for old, e in changes if isinstance(e, WaitStarted)]
    if opened:
        await conn.execute(
            OPEN,
            [old.run_id for old, _ in opened],
            [old.project_id for old, _ in opened],
            [e.step for _, e in opened],
            [e.kind for _, e in opened],
            [e.name for _, e in opened],
            [e.match for _, e in opened],
            [e.due_at for _, e in opened],
            [e.at for _, e in opened],
            [_ids(e.children) if e.children else None for _, e in opened],
            [e.needed for _, e in opened],
        )


def _ids(children: Sequence[uuid.UUID]) -> str:
    """A wait's children as the JSON text of an array of run ids."""
    return msgspec.json.encode([str(c) for c in children]).decode()
