"""Child runs: the parent's wait start and the reads of a run's family (docs/workers.md, Child
runs). Creating a child is intake's (:mod:`awooop.worker.child_runs`); ending the wait is the
run write path's (:mod:`awooop.eventlog.child_waits`).

:func:`start_wait` is the worker's wait start, fenced, in a tenant transaction of the run's
project: under the parent's row lock it reads the children's committed states; when enough of
them have finished already their outcomes are journaled as a step (``StepCompleted``) and
returned, else the run starts waiting (``WaitStarted`` kind "children": WAITING_EVENT, its lease
released, the wait's row written in the same transaction). A child that finishes meanwhile
waits for the parent's lock and then sees the wait (:mod:`awooop.eventlog.child_waits`), so no
finish is missed between the read and the wait.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.core.events import StepCompleted, WaitStarted
from awooop.eventlog import child_state, child_waits
from awooop.eventlog.wait_state import CHILDREN
from awooop.runs import run_rows
from awooop.runs.leases import fenced_record

# --- SQL -------------------------------------------------------------------------------------
# A run's unfinished children (awooop_run_state_children_unfinished_idx, whose predicate this
# is): the bound on starting more.
PENDING = """
SELECT count(*) FROM awooop_run_state
WHERE parent_run_id = $1 AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
"""
# A run's children, oldest first (run ids are time-ordered), at most $2
# (awooop_run_state_parent_idx).
FAMILY = """
SELECT run_id, provider_event_id, parent_run_id, contract_id, status, created_at,
       finished_at, failure_code
FROM awooop_run_state
WHERE parent_run_id = $1
ORDER BY run_id
LIMIT $2
"""
# How many children a run has, counted up to $2 (an index-only probe of at most $2 entries).
TOTAL = """
SELECT count(*) FROM (
    SELECT 1 FROM awooop_run_state WHERE parent_run_id = $1 LIMIT $2) AS kids
"""
COUNT_CAP = 100_000  # a family's size is shown as "at least" this beyond it
PARENT = "SELECT run_id, status, contract_id FROM awooop_run_state WHERE run_id = $1"
# ---------------------------------------------------------------------------------------------


class ChildRow(msgspec.Struct, frozen=True, kw_only=True):
    """One child as ``awooop runs show`` and the console's run page list it."""

    run_id: uuid.UUID
    key: str
    contract_id: str | None
    status: str
    created_at: datetime
    finished_at: datetime | None = None
    failure_code: str | None = None


class Family(msgspec.Struct, frozen=True, kw_only=True):
    """A run's parent (if it is a child) and its children (the oldest ``limit``)."""

    parent_run_id: uuid.UUID | None = None
    parent_status: str | None = None
    children: list[ChildRow] = msgspec.field(default_factory=list)
    children_total: int = 0
    children_finished: int = 0


async def pending_count(conn: Connection, run_id: uuid.UUID) -> int:
    """How many children of ``run_id`` are unfinished (under its row lock: exact)."""
    return int(await conn.fetchval(PENDING, run_id))


async def family(
    conn: Connection, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, limit: int = 200
) -> Family:
    """The parent and children of ``run_id`` (a tenant or platform read)."""
    parent = None if parent_run_id is None else await conn.fetchrow(PARENT, parent_run_id)
    rows = await conn.fetch(FAMILY, run_id, limit)
    children = [
        ChildRow(
            run_id=r["run_id"],
            key=child_state.key_of(r["provider_event_id"], run_id),
            contract_id=r["contract_id"],
            status=r["status"],
            created_at=r["created_at"],
            finished_at=r["finished_at"],
            failure_code=r["failure_code"],
        )
        for r in rows
    ]
    total = len(rows) if len(rows) < limit else int(await conn.fetchval(TOTAL, run_id, COUNT_CAP))
    unfinished = await pending_count(conn, run_id) if total else 0
    return Family(
        parent_run_id=parent_run_id,
        parent_status=None if parent is None else parent["status"],
        children=children,
        children_total=total,
        children_finished=total - unfinished,
    )


async def start_wait(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    attempt: int,
    *,
    step: str,
    children: Sequence[uuid.UUID],
    needed: int,
    time_out: timedelta | None,
    due_at: datetime | None,
    metadata: dict[str, Any] | None = None,
) -> list[child_state.ChildResult] | None:
    """The worker's wait for ``needed`` of ``children`` (module doc): their outcomes when they
    have finished already (journaled under ``step``), else None (the run waits; its timeout
    at ``due_at``, else ``time_out`` from now). A run that is not this run's child is refused
    (E-INPUT-001) and nothing is written."""
    await run_rows.lock(conn, run_id)
    try:
        found = await child_waits.outcomes(conn, run_id, children)
    except KeyError as missing:
        raise InvalidInputError(
            f"run {missing.args[0]} is not a child of this run", run_id=run_id
        ) from None
    if child_state.satisfied([r.status for r in found], needed):
        results = child_state.encoded(found)
        await fenced_record(
            conn,
            run_id,
            worker_id,
            attempt,
            lambda _s, at: StepCompleted(
                at=at, worker_id=worker_id, attempt=attempt, step=step, result=results
            ),
            metadata,
        )
        return found
    await fenced_record(
        conn,
        run_id,
        worker_id,
        attempt,
        lambda _s, at: WaitStarted(
            at=at,
            worker_id=worker_id,
            attempt=attempt,
            step=step,
            kind=CHILDREN,
            children=tuple(children),
            needed=needed,
            due_at=due_at or (None if time_out is None else at + time_out),
        ),
        metadata,
    )
    return None
