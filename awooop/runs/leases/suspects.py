"""Suspects (R-13, R-19): runs that were in flight on a worker when it died, and run alone.

A worker process that dies (a handler's ``os._exit``, a crash, out of memory, ``kill -9``)
leaves only expired leases behind. When it held one run, that run killed it (or shared the
machine with what did): the death is charged to it, as an attempt. When it held several,
Postgres cannot tell which one did it, so none is charged: each is requeued as a suspect
(:func:`awooop.runs.leases.rules.reap_event` with ``shared``), and a suspect runs ALONE on a
worker (:func:`claim_suspect`, taken only by a worker with nothing else in flight, which takes
nothing else meanwhile: :mod:`awooop.worker.isolation`). A suspect's next death is therefore
its own and is charged; a suspect that completes alone was innocent. The decisions are pure
(``rules``); this module reads what they need and claims suspects. Platform role: a worker
holds runs of several projects, and the question is about the worker, not one project.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from awooop.core.db import Connection
from awooop.core.events import RunFailed, RunRequeued, run_stream_id
from awooop.eventlog import run_reads
from awooop.eventlog import runs as log_runs
from awooop.eventlog.batches import EVERY, Served
from awooop.eventlog.state import MAX_ATTEMPTS_CODE, RunState, row_to_state
from awooop.runs.leases.rules import claim_event, died_sharing, reap_event

# What else the dead worker held: runs it still holds (leased, through the partial index of
# leased runs) and runs its death already made suspects (through the suspects' worker index).
OTHERS_OF_WORKER = """
SELECT
    (SELECT count(*) FROM awooop_run_state
     WHERE status IN ('RUNNING', 'WAITING_TOOL') AND worker_id = $1 AND run_id <> $2)
        AS leased,
    (SELECT count(*) FROM awooop_run_state
     WHERE suspect_worker_id = $1 AND run_id <> $2) AS suspected
"""

# The deaths charged to the run before this one: requeues that were not suspect (also those
# stored before the field existed: all charged) and earlier max-attempts failures (a retried
# run that died again). Read only when the run is about to FAIL, for the reason's count.
LONE_DEATHS = f"""
SELECT count(*) FROM awooop_events
WHERE stream_id = $1
  AND ((event_type = 'RunRequeued' AND NOT coalesce((data->>'suspect')::boolean, false))
       OR (event_type = 'RunFailed' AND data->>'code' = '{MAX_ATTEMPTS_CODE}'))
"""  # noqa: S608 - a constant error code


def workers_with_several(states: Iterable[RunState]) -> frozenset[str]:
    """Pure: the workers that hold more than one of these expired runs (a batch the reaper or
    a polling pass locked): their deaths were shared, no need to ask."""
    seen = Counter(s.worker_id for s in states if s.worker_id is not None)
    return frozenset(w for w, n in seen.items() if n > 1)


async def reap_decision(
    conn: Connection, state: RunState, now: datetime, *, shared: bool = False
) -> RunRequeued | RunFailed:
    """The reap event for ``state`` (locked by the caller, its lease expired): shared death or
    the run's own (see the module docstring); ``shared`` when the caller already knows. The
    caller writes it."""
    if not shared:
        others = await conn.fetchrow(OTHERS_OF_WORKER, state.worker_id, state.run_id)
        assert others is not None  # an aggregate answers one row
        shared = died_sharing(others["leased"], others["suspected"])
    if shared or state.attempt_count < state.max_attempts:
        return reap_event(state, now, shared=shared)
    before: int = await conn.fetchval(LONE_DEATHS, run_stream_id(state.run_id))
    return reap_event(state, now, lone_deaths=before + 1)


async def claim_suspect(
    conn: Connection,
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None = None,
    served: Served = EVERY,
) -> RunState | None:
    """Claim the oldest dispatchable suspect that the worker serves (``served``: its routes)
    (platform role); None when there is none free. Only for a worker that holds nothing else
    and takes nothing else while it runs it."""
    row = await conn.fetchrow(run_reads.LOCK_SUSPECT, *served)
    if row is None:
        return None
    state = row_to_state(row)
    claimed = claim_event(state, row["db_now"], worker_id, ttl_s, served.version)
    return await log_runs.apply_and_store(conn, state, claimed, metadata)


async def suspects_waiting(conn: Connection, served: Served = EVERY) -> bool:
    """Whether a suspect that the worker serves (``served``) waits for it to run it alone (one
    indexed probe)."""
    return bool(await conn.fetchval(run_reads.SUSPECTS_WAITING, *served))


def requeued_for_isolation(reaped: RunRequeued | RunFailed, state: RunState) -> bool:
    """Pure: a reaped run that only an isolated claim may take now (the taker requeues it and
    leaves it to a worker with nothing else in flight)."""
    return isinstance(reaped, RunRequeued) and state.suspect_worker_id is not None
