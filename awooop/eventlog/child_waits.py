"""Child runs in the run write path: a parent's wait ends when enough of its children have
finished, and a cancelled parent cancels its children (docs/workers.md, Child runs).

:func:`follow` is called by the run write path (:mod:`awooop.eventlog.runs`) for every change
it stores, in the transaction of the event:

- a child that finished (COMPLETED, FAILED or CANCELLED, whichever event ended it): its parent's
  row is locked and, when the parent waits for children (``awooop_run_waits``, kind
  "children"), the children's committed states are read (this child's own is this
  transaction's) and, once :func:`awooop.eventlog.child_state.satisfied`, ``ChildrenFinished``
  is written to the parent with every child's outcome (RESUMED: the relay dispatches it).
  Release is derived from the states, never from a counter: two children finishing at once
  are serialised by the parent's lock, and the second sees the first's commit. A child that
  finishes before its parent waits is seen when the wait starts, which reads the same states
  under the same lock (:func:`awooop.runs.children.start_wait`). So the wait ends exactly once,
  and a timeout (``TimerFired``, decided under the same lock) and the last child never both end
  it.
- a run that was cancelled (``RunCancelled``): its unfinished children that are cancelled with
  their parent (``cancel_with_parent``) are cancelled in the same transaction (and theirs in
  turn), and the workers holding them are told (``awooop_run_cancelled``). A child whose row
  another transaction holds is skipped, never waited for (that transaction may be the child's
  own end, waiting for this parent's lock): the parent is kept in ``awooop_child_cancels`` and
  the ``timers`` loop cancels the rest (:func:`cancel_left`).

Locks are taken children first, then parents (in run id order): a finishing child holds its
row and then asks for its parent's; nothing here waits for a child's row while it holds a
parent's.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from awooop.core.db import Connection
from awooop.core.events import ChildrenFinished, Event, RunCancelled
from awooop.eventlog import child_state, queries, run_reads
from awooop.eventlog.state import TERMINAL, RunState, RunStatus, row_to_state

WAIT = queries.load("children_wait")
STATES = queries.load("children_states")
RESULTS = queries.load("children_results")
FINISHED = queries.load("children_finished")
LOCK_UNFINISHED = queries.load("children_lock_unfinished")
LEFT = queries.load("children_left")
KEEP = queries.load("child_cancels_keep")
TAKE = queries.load("child_cancels_take")
DONE = queries.load("child_cancels_done")
# The channel workers listen on for cancelled runs (awooop.runs.control names it from here).
CANCEL_CHANNEL = "awooop_run_cancelled"
NOTIFY_CANCELLED = "SELECT pg_notify($1, run_id) FROM unnest($2::text[]) AS run_id"
PLATFORM_ACTOR = "awooop"

Metadata = dict[str, Any] | Sequence[dict[str, Any] | None] | None
Store = Callable[[Connection, Sequence[tuple[RunState, Event]], Metadata], Awaitable[Any]]


async def follow(
    conn: Connection,
    changes: Sequence[tuple[RunState, Event]],
    new_states: Sequence[RunState],
    store: Store,
    metadata: Metadata = None,
) -> None:
    """Resume the parents whose wait the finished children of ``changes`` satisfy, and cancel
    the children of the runs they cancelled (module doc). ``store`` is the write path's
    ``apply_and_store_many``."""
    meta = metadata if isinstance(metadata, dict) else None
    parents = sorted(
        {s.parent_run_id for s in new_states if s.parent_run_id and s.status in TERMINAL}
    )
    for parent_run_id in parents:
        await resume_if_satisfied(conn, parent_run_id, store, meta)
    cancelled = [(old.run_id, e.actor) for old, e in changes if isinstance(e, RunCancelled)]
    if cancelled:
        await cancel_children(conn, cancelled, store, meta)


async def outcomes(
    conn: Connection, parent_run_id: uuid.UUID, children: Sequence[uuid.UUID]
) -> list[child_state.ChildResult]:
    """The children's outcomes now, in their order; a run that is not ``parent_run_id``'s
    child raises KeyError (a caller's handles are checked before)."""
    rows = await conn.fetch(STATES, list(children), parent_run_id)
    return child_state.outcomes(children, rows)


async def results(
    conn: Connection, parent_run_id: uuid.UUID, children: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Any]:
    """The results of the completed ``children`` of ``parent_run_id``, by run id."""
    rows = await conn.fetch(RESULTS, list(children), parent_run_id)
    return {r["run_id"]: r["result"] for r in rows}


async def resume_if_satisfied(
    conn: Connection,
    parent_run_id: uuid.UUID,
    store: Store,
    metadata: dict[str, Any] | None = None,
) -> bool:
    """Lock the parent; if it waits for children and enough have finished, write
    ``ChildrenFinished`` (RESUMED). Returns whether it did."""
    row = await conn.fetchrow(run_reads.LOCK, parent_run_id)
    if row is None or row["status"] != RunStatus.WAITING_EVENT:
        return False
    wait = await conn.fetchrow(WAIT, parent_run_id)
    if wait is None:
        return False  # asleep, or waiting for a signal
    children = [uuid.UUID(str(c)) for c in wait["children"]]
    if await conn.fetchval(FINISHED, children, parent_run_id) < wait["needed"]:
        return False
    found = await outcomes(conn, parent_run_id, children)
    event = ChildrenFinished(
        at=row["db_now"],
        step=wait["step"],
        results=child_state.encoded(found),
        finished=child_state.finished_count([r.status for r in found]),
    )
    await store(conn, [(row_to_state(row), event)], metadata)
    return True


async def cancel_children(
    conn: Connection,
    parents: Sequence[tuple[uuid.UUID, str]],
    store: Store,
    metadata: dict[str, Any] | None = None,
) -> tuple[int, list[uuid.UUID]]:
    """Cancel the unfinished children (cancelled with their parent) of the cancelled runs
    ``parents`` (run id, the actor who cancelled it); keep the parents whose children were
    locked elsewhere for the timers loop. Returns how many children this cancelled (their
    own children aside) and the parents with children left."""
    actors = dict(parents)
    rows = await conn.fetch(LOCK_UNFINISHED, list(actors))
    changes: list[tuple[RunState, Event]] = []
    for r in rows:
        parent = r["parent_run_id"]
        reason = f"its parent run {parent} was cancelled"
        changes.append((row_to_state(r), RunCancelled(at=r["db_now"], actor=actors[parent],
                                                       reason=reason)))  # fmt: skip
    if changes:
        await store(conn, changes, metadata)  # follow() again: their children in turn
        await conn.execute(NOTIFY_CANCELLED, CANCEL_CHANNEL, [str(s.run_id) for s, _ in changes])
    left = await conn.fetch(LEFT, list(actors))
    if left:
        await conn.execute(
            KEEP, [r["parent_run_id"] for r in left], [r["project_id"] for r in left]
        )
    return len(changes), [r["parent_run_id"] for r in left]


async def cancel_left(conn: Connection, limit: int, store: Store) -> tuple[int, int]:
    """The timers loop: cancel the children left by up to ``limit`` cancelled parents (platform
    role). Returns (parents looked at, children cancelled)."""
    taken = sorted(r["parent_run_id"] for r in await conn.fetch(TAKE, limit))
    if not taken:
        return 0, 0
    cancelled, left = await cancel_children(conn, [(p, PLATFORM_ACTOR) for p in taken], store)
    await conn.execute(DONE, taken, left)
    return len(taken), cancelled
