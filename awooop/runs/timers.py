"""Firing the due waits of sleeping and waiting runs (the ``timers`` loop, docs/workers.md).

:func:`fire_due` locks up to ``limit`` runs whose open wait (``awooop_run_waits``) is due,
picked round-robin across the projects with due waits (``run_lock_wait_due.sql``), skipping
rows another transaction holds (so any number of loops fire each wait once), reads their
waits again under the lock, and writes ``TimerFired`` on each (RESUMED: the relay dispatches
it), all in one statement (``fire_many.sql``: ``apply`` in SQL), which removes the waits' rows
too (as :mod:`awooop.eventlog.waits` does on the generic write path). A
signal delivered meanwhile took the run's lock first and ended the wait: the run is no longer
locked here as WAITING_EVENT with a due wait, so a signal and a timeout never both end one
wait (:mod:`awooop.runs.signals`).

The timers loop fires a wait ``grace_s`` after its due time: the worker whose attempt started
a sleep fires and claims it itself when it is due (``fire_claim.sql``, the runs it names at the
versions it left them at: :mod:`awooop.worker.local_timers`), and the loop is the fallback for the
sleeps no worker fired (it stopped, was killed or had no free slot). Both lock the run's row
first, so a wait is fired once whoever comes first.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

from awooop.core.db import Connection
from awooop.core.events import TimerFired
from awooop.eventlog import batches, run_reads
from awooop.eventlog.state import RunState, row_to_state

# --- SQL -------------------------------------------------------------------------------------
# The locked runs' waits, read again after the lock: every change of a run's wait holds the
# run's row lock (the write path), so these are current.
DUE_WAITS = """
SELECT run_id, step, kind, due_at FROM awooop_run_waits
WHERE run_id = ANY($1::uuid[]) AND due_at <= $2
"""
# Seconds until the earliest wait is due $1 seconds ago (the loop's grace; negative: overdue;
# NULL: none), by the database clock: one probe of awooop_run_waits_due_idx.
NEXT_DUE_IN = """
SELECT extract(epoch FROM min(due_at) + make_interval(secs => $1::float8)
                          - clock_timestamp())::float8
FROM awooop_run_waits WHERE due_at IS NOT NULL
"""
# ---------------------------------------------------------------------------------------------


# Around the writes that resume runs, given how many: yields the metadata their events carry
# (the timers loop's span of them: awooop.loops.timers.resume_span).
Traced = Callable[[int], AbstractContextManager[dict[str, Any]]]


def untraced(_runs: int) -> AbstractContextManager[dict[str, Any]]:
    return nullcontext({})


async def fire_due(
    conn: Connection,
    limit: int,
    metadata: dict[str, Any] | None = None,
    *,
    grace_s: float = 0.0,
    traced: Traced = untraced,
) -> list[tuple[RunState, TimerFired]]:
    """Fire up to ``limit`` waits due ``grace_s`` ago or earlier (module doc); platform role.
    Returns the runs resumed. ``traced``: entered around the writes, when there are any (its
    metadata added)."""
    rows = await conn.fetch(run_reads.LOCK_WAIT_DUE, limit, grace_s)
    if not rows:
        return []
    now: datetime = rows[0]["db_now"]
    states = {r["run_id"]: row_to_state(r) for r in rows}
    waits = await conn.fetch(DUE_WAITS, list(states), now - timedelta(seconds=grace_s))
    changes = [
        (states[w["run_id"]], fired(now, w)) for w in sorted(waits, key=lambda w: w["run_id"])
    ]
    if not changes:
        return []
    with traced(len(changes)) as trace_meta:
        resumed = await batches.fire_many(conn, changes, {**(metadata or {}), **trace_meta})
    return [(state, event) for state, (_, event) in zip(resumed, changes, strict=True)]


def fired(now: datetime, wait: Any) -> TimerFired:
    return TimerFired(at=now, step=wait["step"], kind=wait["kind"], due_at=wait["due_at"])


async def next_due_in(conn: Connection, grace_s: float = 0.0) -> float | None:
    """Seconds until the earliest open wait is due ``grace_s`` ago (<= 0: now), or None: none
    has a time."""
    value = await conn.fetchval(NEXT_DUE_IN, grace_s)
    return None if value is None else float(value)
