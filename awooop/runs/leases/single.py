"""One run at a time: claim, poll, take or reap expired runs, heartbeat, the fenced write,
release. Each reads the row under the lock its job needs and writes through the log room
(:mod:`awooop.eventlog.runs`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import LeaseLostError
from awooop.core.events import Event, LeaseReleased, RunFailed, RunRequeued
from awooop.eventlog import deadletters, run_reads
from awooop.eventlog import runs as log_runs
from awooop.eventlog.batches import EVERY, Served
from awooop.eventlog.state import RunState, RunStatus, row_to_state
from awooop.runs import run_rows
from awooop.runs.leases.rules import (
    Availability,
    Fence,
    Taken,
    availability,
    claim_event,
    fence_problem,
)
from awooop.runs.leases.suspects import (
    reap_decision,
    requeued_for_isolation,
    workers_with_several,
)

# The polling path's fair pass looks at this many waiting runs from the head of the fair order
# (run_lock_fair.sql): bounded work per poll, however long the paused or full-key backlogs are.
FAIR_WINDOW = 64

# --- I/O -----------------------------------------------------------------------------------


async def claim(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None = None,
    served: Served = EVERY,
) -> RunState | None:
    """Take the lease of ``run_id`` if it can be taken now (and ``served``: the worker's routes
    and handler version, awooop.runs.routing); None if not (nothing written)."""
    row = await conn.fetchrow(run_reads.LOCK_CLAIMABLE, run_id, *served)
    if row is None:
        return None
    state = row_to_state(row)
    claimed = claim_event(state, row["db_now"], worker_id, ttl_s, served.version)
    return await log_runs.apply_and_store(conn, state, claimed, metadata)


async def poll(
    conn: Connection,
    worker_id: str,
    ttl_s: float,
    limit: int,
    min_age_s: float,
    metadata: dict[str, Any] | None = None,
    *,
    fair: bool = True,
    served: Served = EVERY,
) -> list[RunState]:
    """Claim up to ``limit`` dispatchable runs older than ``min_age_s`` (platform role) that the
    worker serves (``served``: its routes): in the fair order between projects first (``fair``;
    within its bounded window), then oldest first."""
    if limit <= 0:
        return []
    rows = []
    if fair:
        rows = list(await conn.fetch(run_reads.LOCK_FAIR, min_age_s, limit, FAIR_WINDOW, *served))
    if len(rows) < limit:
        taken = [row["run_id"] for row in rows]
        rows += await conn.fetch(
            run_reads.LOCK_DISPATCHABLE, min_age_s, limit - len(rows), taken, *served
        )
    changes = []
    for row in rows:
        state = row_to_state(row)
        changes.append((state, claim_event(state, row["db_now"], worker_id, ttl_s, served.version)))
    return await log_runs.apply_and_store_many(conn, changes, metadata)


async def take_expired(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None = None,
    served: Served = EVERY,
) -> Taken | None:
    """Reap ``run_id`` if its lease expired and the worker serves it (``served``), and, when it
    may run again, claim it."""
    row = await conn.fetchrow(run_reads.LOCK_EXPIRED, run_id, *served)
    if row is None:
        return None
    return await _reap_and_claim(conn, row, worker_id, ttl_s, metadata, served.version)


async def take_expired_batch(
    conn: Connection,
    worker_id: str,
    ttl_s: float,
    limit: int,
    metadata: dict[str, Any] | None = None,
    served: Served = EVERY,
) -> list[Taken]:
    """The polling path's share of recovery: up to ``limit`` expired runs that the worker
    serves (``served``), reaped and claimed."""
    if limit <= 0:
        return []
    rows = await conn.fetch(run_reads.LOCK_EXPIRED_OLDEST, limit, *served)
    several = workers_with_several(row_to_state(row) for row in rows)
    return [
        await _reap_and_claim(conn, row, worker_id, ttl_s, metadata, served.version, several)
        for row in rows
    ]


async def _reap_and_claim(
    conn: Connection,
    row: Any,
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None,
    version: str | None,
    several: frozenset[str] = frozenset(),
) -> Taken:
    now: datetime = row["db_now"]
    state = reaped_state(row)
    reaped = await reap_decision(conn, state, now, shared=state.worker_id in several)
    state = await log_runs.apply_and_store(conn, state, reaped, metadata)
    held = row["paused"] or row["over_limit"]  # left PENDING: a resume, a freed slot
    if isinstance(reaped, RunFailed) or requeued_for_isolation(reaped, state) or held:
        return Taken(state, reaped, claimed=False)
    state = await log_runs.apply_and_store(
        conn, state, claim_event(state, now, worker_id, ttl_s, version), metadata
    )
    return Taken(state, reaped, claimed=True)


def reaped_state(row: Any) -> RunState:
    """A locked expired run, its heartbeat the worker's last renewal as the rule reports it
    (``heartbeat_seen``: its own, or its session's): the reap event says when that was, and the
    reap releases the row's heartbeat, so nothing of it is written back."""
    return msgspec.structs.replace(row_to_state(row), heartbeat_at=row["heartbeat_seen"])


async def reap(
    conn: Connection, limit: int, metadata: dict[str, Any] | None = None
) -> list[tuple[RunState, RunRequeued | RunFailed]]:
    """R-13: requeue or fail up to ``limit`` runs whose lease expired (platform role), of
    every contract (a requeue runs nothing: the run's workers take it)."""
    rows = await conn.fetch(run_reads.LOCK_EXPIRED_OLDEST, limit, *EVERY)
    return await reap_rows(conn, rows, metadata)


async def reap_rows(
    conn: Connection, rows: list[Any], metadata: dict[str, Any] | None = None
) -> list[tuple[RunState, RunRequeued | RunFailed]]:
    """Requeue or fail the leased runs of ``rows`` (locked by the caller, with ``db_now``),
    whose attempts are over: their leases ran out, or their worker's session ended."""
    states = [reaped_state(row) for row in rows]
    several = workers_with_several(states)
    done = []
    for row, state in zip(rows, states, strict=True):
        event = await reap_decision(conn, state, row["db_now"], shared=state.worker_id in several)
        done.append((await log_runs.apply_and_store(conn, state, event, metadata), event))
    return done


async def heartbeat(
    conn: Connection,
    worker_id: str,
    held: Mapping[uuid.UUID, int],
    ttl_s: float,
    steps: Mapping[uuid.UUID, log_runs.CurrentStep] | None = None,
) -> set[uuid.UUID]:
    """R-12: renew the live leases of ``worker_id``'s attempts in ``held`` (run id -> attempt);
    return the runs renewed. ``steps``: the step each attempt is in now (see
    :func:`awooop.eventlog.runs.renew_leases`)."""
    return await log_runs.renew_leases(conn, worker_id, held, ttl_s, steps)


async def fences(
    conn: Connection, run_ids: list[uuid.UUID]
) -> tuple[dict[uuid.UUID, Fence], datetime]:
    """Who holds each of ``run_ids`` as committed (no lock), and the database clock."""
    rows = await conn.fetch(run_reads.FENCES, run_ids)
    found = {
        row["run_id"]: Fence(
            status=RunStatus(row["status"]),
            worker_id=row["worker_id"],
            attempt_count=row["attempt_count"],
            lease_until=row["lease_until"],
        )
        for row in rows
    }
    now: datetime = rows[0]["db_now"] if rows else await conn.fetchval("SELECT now()")
    return found, now


async def peek(conn: Connection, run_id: uuid.UUID) -> tuple[RunState | None, datetime]:
    """The run's committed state (no lock), its lease as the rule sees it (its worker's
    session too: a state to judge, never to write back), and the database clock."""
    row = await conn.fetchrow(run_reads.PEEK, run_id)
    if row is None:
        now: datetime = await conn.fetchval("SELECT now()")
        return None, now
    return msgspec.structs.replace(row_to_state(row), lease_until=row["lease_seen"]), row["db_now"]


async def fenced_record(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    attempt: int,
    make_event: Callable[[RunState, datetime], Event | tuple[Event, ...]],
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Write an event on behalf of ``(worker_id, attempt)``: refused with E-RUN-002 unless the
    attempt still holds a live lease (see :mod:`awooop.runs.leases`)."""
    state, now = await run_rows.lock(conn, run_id)
    problem = fence_problem(state, now, worker_id, attempt)
    if problem is not None:
        raise LeaseLostError(
            f"write refused: {problem}", run_id=run_id, worker_id=worker_id, attempt=attempt
        )
    return await log_runs.apply_and_store(conn, state, make_event(state, now), metadata)


async def release(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    attempt: int,
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Give the lease back (shutdown): the run is PENDING again and dispatched at once."""
    return await fenced_record(
        conn,
        run_id,
        worker_id,
        attempt,
        lambda _s, now: LeaseReleased(at=now, worker_id=worker_id, attempt=attempt),
        metadata,
    )


class Undelivered(msgspec.Struct, frozen=True, kw_only=True):
    """The work message a consumer gives up on, as its dead letter keeps it."""

    group: str
    entry_id: str
    delivery_count: int
    event_type: str
    message: bytes


async def fail_undeliverable(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    reason: str,
    code: str,
    metadata: dict[str, Any] | None = None,
    *,
    undelivered: Undelivered | None = None,
) -> RunState | None:
    """Fail a run whose work message is being dead-lettered, if nobody is making progress on
    it (dispatchable, neither paused nor held by its full concurrency key, or its lease
    expired); None (nothing written) otherwise.
    The failure is marked ``dead_letter``: its dead letter is recorded with it
    (:mod:`awooop.eventlog.deadletters`), with what ``undelivered`` says about the message."""
    found = await run_rows.lock_if_present(conn, run_id)
    if found is None:
        return None
    state, now = found
    seen = availability(state, now, worker_id)
    if seen not in (Availability.CLAIMABLE, Availability.EXPIRED):
        return None
    if seen is Availability.CLAIMABLE and await conn.fetchval(run_reads.PAUSED, run_id):
        return None  # paused or its key full: its deliveries say nothing about the run
    event = RunFailed(at=now, reason=reason, code=code, dead_letter=True)
    failed = await log_runs.apply_and_store(conn, state, event, metadata)
    if undelivered is not None:
        await deadletters.note_delivery(
            conn,
            run_id,
            group_name=undelivered.group,
            source_entry_id=undelivered.entry_id,
            delivery_count=undelivered.delivery_count,
            event_type=undelivered.event_type,
            message=undelivered.message,
        )
    return failed
