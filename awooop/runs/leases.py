"""Run leases (R-11, R-12, R-13, R-16): claim, heartbeat, fenced writes, release, reap.

Postgres is the truth: a worker runs a run only while ``awooop_run_state`` says that its
attempt holds the lease. The rules, in one place:

- **claim**: one conditional statement locks the row only when the run is PENDING or RESUMED
  and its lease is empty or expired (``FOR UPDATE SKIP LOCKED``); ``RunClaimed`` is applied in
  the same transaction (RUNNING, ``attempt_count + 1``, ``worker_id``, ``lease_until`` = the
  database clock + the lease TTL). The polling path does the same over many rows at once.
  Claims of announced runs (:func:`claim_many`) are that whole transaction in ONE statement
  (``CLAIM_MANY``: lock, stream head, row, event), so that a claim costs one round trip; its
  row update is ``apply(state, RunClaimed)`` written in SQL, and a test holds the two equal.
  The commonest fenced write, ``RunCompleted``, is one statement too (:func:`complete_many`,
  ``COMPLETE_MANY``): the fence is its WHERE clause.
- **fence**: every write on behalf of an attempt (step results, tool waits, approval requests,
  completion, failure, release) locks the row and is refused with E-RUN-002 unless the row
  still names this worker and attempt, is RUNNING or WAITING_TOOL, and its lease has not
  expired by the database clock. An expired lease is lost even before the reaper has seen it:
  a heartbeat does not revive it and a fenced write refuses it, so "who may write" never
  depends on how quickly the reaper runs.
- **heartbeat**: one statement renews every live lease of a worker and returns the runs it
  renewed; a run missing from the answer was lost. Heartbeats write no events: ``lease_until``
  and ``heartbeat_at`` of a leased run are the lease clock, the only columns of the row that
  are not ``apply()`` folded over the events (the replay tool compares them only for runs that
  are not leased).
- **reap**: a RUNNING or WAITING_TOOL run whose lease expired goes back to PENDING
  (``RunRequeued``) while ``attempt_count < max_attempts``, else it FAILS with
  ``Max retry attempts exceeded`` (E-RUN-004). Both events name the expired attempt, its
  worker and the lease's last renewal (:func:`lease_expiry` says it in words, in the event's
  reason and in ``failure_reason``); the failure is marked ``dead_letter``, so the relay puts
  the run's work on the dead-letter stream when it publishes it (R-19). WAITING_APPROVAL holds
  no lease and is never reaped. The same decision serves the reaper loop and a worker that
  takes an expired run directly (reclaim, polling), which requeues and claims in one
  transaction.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import msgspec

from awooop.core import storable
from awooop.core.db import Connection
from awooop.core.errors import LeaseLostError, UnstorableValueError
from awooop.core.events import Event, LeaseReleased, RunClaimed, RunFailed, RunRequeued
from awooop.log import eventlog
from awooop.runs import store
from awooop.runs.state import (
    COLUMNS,
    DISPATCHABLE,
    LEASED,
    MAX_ATTEMPTS_CODE,
    MAX_ATTEMPTS_REASON,
    TERMINAL,
    RunState,
    RunStatus,
)

# --- SQL -----------------------------------------------------------------------------------

HEAD_CONFLICT_RETRIES = 3  # a newer writer of the run's stream committed: write again
_json_encoder = msgspec.json.Encoder()

_COLS = ", ".join(COLUMNS)

# the claim. Locks the row only if it can be claimed right now; a row another
# transaction holds is skipped, never waited for.
CLAIM = f"""
SELECT {_COLS}, now() AS db_now FROM awooop_run_state
WHERE run_id = $1
  AND status IN ('PENDING', 'RESUMED')
  AND (lease_until IS NULL OR lease_until < now())
FOR UPDATE SKIP LOCKED
"""  # noqa: S608 - constant column names

# The polling path: dispatchable runs that have waited at least $1 seconds (no stream message
# got them taken), oldest first, through the partial index on dispatchable runs.
POLL = f"""
SELECT {_COLS}, now() AS db_now FROM awooop_run_state
WHERE status IN ('PENDING', 'RESUMED')
  AND (lease_until IS NULL OR lease_until < now())
  AND updated_at <= now() - make_interval(secs => $1)
ORDER BY created_at
LIMIT $2
FOR UPDATE SKIP LOCKED
"""  # noqa: S608 - constant column names

# One run whose lease expired (a worker takes it: requeue and claim in one transaction).
LOCK_EXPIRED = f"""
SELECT {_COLS}, now() AS db_now FROM awooop_run_state
WHERE run_id = $1
  AND status IN ('RUNNING', 'WAITING_TOOL')
  AND lease_until < now()
FOR UPDATE SKIP LOCKED
"""  # noqa: S608 - constant column names

# The reaper and the polling path: expired leases, oldest first (partial index on leased runs).
EXPIRED = f"""
SELECT {_COLS}, now() AS db_now FROM awooop_run_state
WHERE status IN ('RUNNING', 'WAITING_TOOL')
  AND lease_until < now()
ORDER BY lease_until
LIMIT $1
FOR UPDATE SKIP LOCKED
"""  # noqa: S608 - constant column names

PEEK = f"SELECT {_COLS}, now() AS db_now FROM awooop_run_state WHERE run_id = $1"  # noqa: S608

# one statement renews every live lease of a worker. No event: the lease clock.
HEARTBEAT = """
UPDATE awooop_run_state
SET lease_until = now() + make_interval(secs => $3), heartbeat_at = now()
WHERE worker_id = $1
  AND run_id = ANY($2::uuid[])
  AND status IN ('RUNNING', 'WAITING_TOOL')
  AND lease_until > now()
RETURNING run_id
"""

# --- pure decisions ------------------------------------------------------------------------


class Availability(enum.StrEnum):
    """What a run's row says to a worker that holds a message (or a poll result) for it."""

    MISSING = "missing"  # no such run (in this project)
    FINISHED = "finished"  # terminal: nothing left to do
    AWAITING_APPROVAL = "awaiting_approval"  # no lease; ApprovalGranted dispatches it again
    CLAIMABLE = "claimable"  # PENDING or RESUMED, lease empty or expired
    HELD = "held"  # a live lease of another worker
    HELD_BY_ME = "held_by_me"  # a live lease of this worker
    EXPIRED = "expired"  # RUNNING/WAITING_TOOL with an expired lease: reap, then claim


def availability(state: RunState | None, now: datetime, worker_id: str) -> Availability:
    if state is None:
        return Availability.MISSING
    if state.status in TERMINAL:
        return Availability.FINISHED
    if state.status is RunStatus.WAITING_APPROVAL:
        return Availability.AWAITING_APPROVAL
    live = state.lease_until is not None and state.lease_until > now
    if state.status in DISPATCHABLE:
        return Availability.HELD if live else Availability.CLAIMABLE
    assert state.status in LEASED
    if not live:
        return Availability.EXPIRED
    return Availability.HELD_BY_ME if state.worker_id == worker_id else Availability.HELD


def claim_event(state: RunState, now: datetime, worker_id: str, ttl_s: float) -> RunClaimed:
    return RunClaimed(
        at=now,
        worker_id=worker_id,
        attempt=state.attempt_count + 1,
        lease_until=now + timedelta(seconds=ttl_s),
    )


def lease_expiry(state: RunState) -> str:
    """What is known when the lease of ``state``'s attempt ran out, in words.

    A worker that ends an attempt itself writes an event (completion, failure, release,
    approval request). An expired lease means that the worker wrote nothing and stopped
    renewing: its process died, or it was cut off from Postgres (it then stops its handlers on
    its own clock) or stalled longer than the lease. Which of these, Postgres cannot tell."""
    since = (
        "it was taken"
        if state.heartbeat_at is None
        else state.heartbeat_at.isoformat(timespec="milliseconds")
    )
    return (
        f"the lease of attempt {state.attempt_count} expired: worker {state.worker_id} "
        f"neither renewed it after {since} nor released it (the worker process died, "
        "or was cut off from Postgres or stalled)"
    )


def reap_event(state: RunState, now: datetime) -> RunRequeued | RunFailed:
    """R-13, R-19: the event for a run whose lease expired. It names the expired attempt and
    its worker; the last such attempt FAILS the run with E-RUN-004 and sends its work to the
    dead-letter stream (``dead_letter``: the relay writes the entry)."""
    if state.attempt_count < state.max_attempts:
        return RunRequeued(
            at=now,
            attempt=state.attempt_count,
            worker_id=state.worker_id,
            last_renewal_at=state.heartbeat_at,
            reason=lease_expiry(state),
        )
    return RunFailed(
        at=now,
        reason=(
            f"{MAX_ATTEMPTS_REASON} ({state.attempt_count} of {state.max_attempts}): "
            f"{lease_expiry(state)}"
        ),
        code=MAX_ATTEMPTS_CODE,
        worker_id=state.worker_id,
        attempt=state.attempt_count,
        last_renewal_at=state.heartbeat_at,
        dead_letter=True,
    )


def fence_problem(state: RunState, now: datetime, worker_id: str, attempt: int) -> str | None:
    """Why ``(worker_id, attempt)`` may not write for this run now; None when it may."""
    if state.status not in LEASED:
        return f"the run is {state.status}"
    if state.worker_id != worker_id or state.attempt_count != attempt:
        return (
            f"attempt {attempt} of {worker_id} no longer holds the lease "
            f"(attempt {state.attempt_count} of {state.worker_id} does)"
        )
    if state.lease_until is None or state.lease_until <= now:
        return "the lease expired"
    return None


# --- I/O -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taken:
    """The outcome of taking an expired run: the reap event applied and, if requeued, the
    claim (``state`` is then RUNNING under the new attempt)."""

    state: RunState
    reaped: RunRequeued | RunFailed
    claimed: bool


async def claim(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None = None,
) -> RunState | None:
    """Take the lease of ``run_id`` if it can be taken now; None if not (nothing written)."""
    row = await conn.fetchrow(CLAIM, run_id)
    if row is None:
        return None
    state = store.row_to_state(row)
    return await store.apply_and_store(
        conn, state, claim_event(state, row["db_now"], worker_id, ttl_s), metadata
    )


async def poll(
    conn: Connection,
    worker_id: str,
    ttl_s: float,
    limit: int,
    min_age_s: float,
    metadata: dict[str, Any] | None = None,
) -> list[RunState]:
    """Claim up to ``limit`` dispatchable runs older than ``min_age_s`` (platform role)."""
    if limit <= 0:
        return []
    rows = await conn.fetch(POLL, min_age_s, limit)
    changes = []
    for row in rows:
        state = store.row_to_state(row)
        changes.append((state, claim_event(state, row["db_now"], worker_id, ttl_s)))
    return await store.apply_and_store_many(conn, changes, metadata)


async def take_expired(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None = None,
) -> Taken | None:
    """Reap ``run_id`` if its lease expired and, when it may run again, claim it."""
    row = await conn.fetchrow(LOCK_EXPIRED, run_id)
    if row is None:
        return None
    return await _reap_and_claim(conn, row, worker_id, ttl_s, metadata)


async def take_expired_batch(
    conn: Connection,
    worker_id: str,
    ttl_s: float,
    limit: int,
    metadata: dict[str, Any] | None = None,
) -> list[Taken]:
    """The polling path's share of recovery: up to ``limit`` expired runs, reaped and claimed."""
    if limit <= 0:
        return []
    rows = await conn.fetch(EXPIRED, limit)
    return [await _reap_and_claim(conn, row, worker_id, ttl_s, metadata) for row in rows]


async def _reap_and_claim(
    conn: Connection,
    row: Any,
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None,
) -> Taken:
    now: datetime = row["db_now"]
    state = store.row_to_state(row)
    reaped = reap_event(state, now)
    state = await store.apply_and_store(conn, state, reaped, metadata)
    if isinstance(reaped, RunFailed):
        return Taken(state, reaped, claimed=False)
    state = await store.apply_and_store(
        conn, state, claim_event(state, now, worker_id, ttl_s), metadata
    )
    return Taken(state, reaped, claimed=True)


async def reap(
    conn: Connection, limit: int, metadata: dict[str, Any] | None = None
) -> list[tuple[RunState, RunRequeued | RunFailed]]:
    """R-13: requeue or fail up to ``limit`` runs whose lease expired (platform role)."""
    rows = await conn.fetch(EXPIRED, limit)
    done = []
    for row in rows:
        state = store.row_to_state(row)
        event = reap_event(state, row["db_now"])
        done.append((await store.apply_and_store(conn, state, event, metadata), event))
    return done


async def heartbeat(
    conn: Connection, worker_id: str, run_ids: list[uuid.UUID], ttl_s: float
) -> set[uuid.UUID]:
    """R-12: renew the live leases of ``worker_id`` among ``run_ids``; return those renewed."""
    if not run_ids:
        return set()
    rows = await conn.fetch(HEARTBEAT, worker_id, run_ids, ttl_s)
    return {r["run_id"] for r in rows}


async def peek(conn: Connection, run_id: uuid.UUID) -> tuple[RunState | None, datetime]:
    """The run's committed state (no lock) and the database clock."""
    row = await conn.fetchrow(PEEK, run_id)
    if row is None:
        now: datetime = await conn.fetchval("SELECT now()")
        return None, now
    return store.row_to_state(row), row["db_now"]


async def fenced_record(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    attempt: int,
    make_event: Callable[[RunState, datetime], Event],
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Write an event on behalf of ``(worker_id, attempt)``: refused with E-RUN-002 unless the
    attempt still holds a live lease (see the module docstring)."""
    state, now = await store.lock(conn, run_id)
    problem = fence_problem(state, now, worker_id, attempt)
    if problem is not None:
        raise LeaseLostError(
            f"write refused: {problem}", run_id=run_id, worker_id=worker_id, attempt=attempt
        )
    return await store.apply_and_store(conn, state, make_event(state, now), metadata)


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


# --- batches: many runs in one transaction (the worker's hot path) -------------------------

# The one-statement writes (CLAIM_MANY, COMPLETE_MANY) share two pieces. _MOVE_HEADS moves the
# stream head of each run in ``locked`` to the run's next version, only where the head is at
# the row's version and was last written by an older transaction (eventlog.APPEND_MANY's rule);
# the runs it moved are the ones written. _written_or_seen returns the written rows, then the
# others as the statement's snapshot saw them (no lock), with ``conflict`` = locked but not
# moved (a newer transaction wrote the stream: try again).
_MOVE_HEADS = """heads AS (
    UPDATE awooop_event_streams AS s
    SET version = l.version + 1, last_tx_id = pg_current_xact_id(), updated_at = now()
    FROM locked AS l
    WHERE s.stream_id = 'run-' || l.run_id
      AND s.version = l.version
      AND s.last_tx_id <= pg_current_xact_id()
    RETURNING l.run_id
)"""


def _written_or_seen(written: str, flag: str) -> str:
    return f"""
SELECT {_COLS}, true AS {flag}, false AS conflict, now() AS db_now FROM {written}
UNION ALL
SELECT {_COLS}, false, run_id IN (SELECT run_id FROM locked), now()
FROM awooop_run_state
WHERE run_id = ANY($1::uuid[]) AND run_id NOT IN (SELECT run_id FROM heads)
"""  # noqa: S608 - constant column and CTE names


# claim_many: the claim transaction as one statement (autocommit: one round trip). The run
# rows are locked first (SKIP LOCKED, in run_id order); a run whose stream head was last
# written by a NEWER transaction is left alone (``conflict``: claiming it would put its event
# before an earlier version in the relay's order, see eventlog.APPEND_MANY) and is retried by
# the caller. ``claimed`` mirrors runs.state.apply(state, RunClaimed): RUNNING, the next
# attempt, worker_id, lease_until = now() + TTL, heartbeat_at = updated_at = now(), version + 1;
# test_claim_statement_matches_apply holds the two equal. Runs not claimed come back as the
# statement's snapshot saw them (no lock), for leases.availability().
CLAIM_MANY = f"""
WITH wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::text[]) AS w(run_id, metadata)
), locked AS (
    SELECT run_id, version FROM awooop_run_state
    WHERE run_id = ANY($1::uuid[])
      AND status IN ('PENDING', 'RESUMED')
      AND (lease_until IS NULL OR lease_until < now())
    ORDER BY run_id
    FOR UPDATE SKIP LOCKED
), {_MOVE_HEADS}, claimed AS (
    UPDATE awooop_run_state AS r
    SET status = 'RUNNING', attempt_count = r.attempt_count + 1, worker_id = $3,
        lease_until = now() + make_interval(secs => $4), heartbeat_at = now(),
        version = r.version + 1, updated_at = now()
    FROM heads AS h
    WHERE r.run_id = h.run_id
    RETURNING r.*
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), 'run-' || c.run_id, c.version, c.project_id, 'RunClaimed',
           jsonb_build_object('type', 'RunClaimed', 'at', c.updated_at,
                              'worker_id', c.worker_id, 'attempt', c.attempt_count,
                              'lease_until', c.lease_until),
           coalesce(w.metadata, '{{}}')::jsonb
    FROM claimed AS c JOIN wanted AS w USING (run_id)
    ORDER BY c.run_id
)
{_written_or_seen("claimed", "claimed")}"""  # noqa: S608 - constant column names

# Ordered, so that two batches locking overlapping runs cannot deadlock.
LOCK_MANY = f"""
SELECT {_COLS}, now() AS db_now FROM awooop_run_state
WHERE run_id = ANY($1::uuid[])
ORDER BY run_id
FOR UPDATE
"""  # noqa: S608 - constant column names


@dataclass(frozen=True)
class FencedWrite:
    """One event to write on behalf of ``(worker_id, attempt)`` (see :func:`fenced_record`)."""

    run_id: uuid.UUID
    worker_id: str
    attempt: int
    make_event: Callable[[RunState, datetime], Event]
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class ClaimBatch:
    """What :func:`claim_many` found: the runs it claimed, the committed state of the others
    (read without a lock, so that the caller can tell finished from held from unknown), and
    the database clock."""

    claimed: dict[uuid.UUID, RunState]
    others: dict[uuid.UUID, RunState]
    now: datetime


async def claim_many(
    conn: Connection,
    run_ids: list[uuid.UUID],
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | list[dict[str, Any] | None] | None = None,
) -> ClaimBatch:
    """:func:`claim` for many runs in one statement (``CLAIM_MANY``): outside a transaction
    it is its own; inside one it is part of it. ``metadata`` is one dict, or one per run id
    (aligned with ``run_ids``). A run whose stream head a newer transaction wrote is claimed
    again (a few times), as the transactional path would retry it."""
    per_run: dict[uuid.UUID, dict[str, Any] | None] = (
        dict(zip(run_ids, metadata, strict=True))
        if isinstance(metadata, list)
        else dict.fromkeys(run_ids, metadata)
    )
    claimed: dict[uuid.UUID, RunState] = {}
    others: dict[uuid.UUID, RunState] = {}
    now: datetime | None = None
    wanted = list(run_ids)
    for attempt in range(HEAD_CONFLICT_RETRIES + 1):
        rows = await conn.fetch(
            CLAIM_MANY,
            wanted,
            [_metadata_json(per_run[r]) for r in wanted],
            worker_id,
            ttl_s,
        )
        conflicts = []
        for row in rows:
            now = row["db_now"]
            state = store.row_to_state(row)
            if row["claimed"]:
                claimed[state.run_id] = state
            elif row["conflict"] and attempt < HEAD_CONFLICT_RETRIES:
                conflicts.append(state.run_id)
            else:
                others[state.run_id] = state
        if not conflicts:
            break
        wanted = conflicts
    if now is None:
        now = await conn.fetchval("SELECT now()")
    return ClaimBatch(claimed, others, now)


def _result_json(result: Any) -> str | None:
    """None stays SQL NULL in the row (as the generic write stores it); JSON otherwise."""
    return None if result is None else _json_encoder.encode(result).decode()


def _metadata_json(metadata: dict[str, Any] | None) -> str | None:
    return None if metadata is None else _json_encoder.encode(metadata).decode()


# complete_many: the fenced RunCompleted as one statement (autocommit: one round trip, and the
# transaction id it holds lives for that statement only, so it holds the relay back less). The
# fence is the WHERE clause (RUNNING, this worker and attempt, lease not expired by the database
# clock; RunCompleted is allowed only from RUNNING), the rows are locked in run_id order (the
# order of LOCK_MANY), and the rest is CLAIM_MANY's pattern. ``written`` mirrors
# runs.state.apply(state, RunCompleted): COMPLETED, the result, lease and waits cleared,
# finished_at = updated_at = now(), version + 1; test_complete_statement_matches_apply holds
# the two equal. Refused runs come back as the snapshot saw them, to say why.
COMPLETE_MANY = f"""
WITH wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[])
        AS w(run_id, worker_id, attempt, result, metadata)
), locked AS (
    SELECT r.run_id, r.version FROM awooop_run_state AS r JOIN wanted AS w USING (run_id)
    WHERE r.status = 'RUNNING'
      AND r.worker_id = w.worker_id
      AND r.attempt_count = w.attempt
      AND r.lease_until > now()
    ORDER BY r.run_id
    FOR UPDATE OF r
), {_MOVE_HEADS}, written AS (
    UPDATE awooop_run_state AS r
    SET status = 'COMPLETED', result = w.result::jsonb, worker_id = NULL, lease_until = NULL,
        heartbeat_at = NULL, finished_at = now(), waiting_for = NULL,
        approval_expires_at = NULL, version = r.version + 1, updated_at = now()
    FROM heads AS h JOIN wanted AS w USING (run_id)
    WHERE r.run_id = h.run_id
    RETURNING r.*
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), 'run-' || x.run_id, x.version, x.project_id, 'RunCompleted',
           jsonb_build_object('type', 'RunCompleted', 'at', x.updated_at,
                              'worker_id', w.worker_id, 'attempt', w.attempt,
                              'result', w.result::jsonb),
           coalesce(w.metadata, '{{}}')::jsonb
    FROM written AS x JOIN wanted AS w USING (run_id)
    ORDER BY x.run_id
)
{_written_or_seen("written", "written")}"""  # noqa: S608 - constant column names


@dataclass(frozen=True)
class Completion:
    """A ``RunCompleted`` to write on behalf of ``(worker_id, attempt)``; ``result`` is the
    handler's value as JSON builtins (``msgspec.to_builtins``)."""

    run_id: uuid.UUID
    worker_id: str
    attempt: int
    result: Any
    metadata: dict[str, Any] | None = None


def completion_problem(completion: Completion) -> UnstorableValueError | None:
    """Pure: the error for a completion whose result or metadata Postgres would refuse
    (:mod:`awooop.core.storable`); None when it can be written."""
    found = storable.encoded_problem(completion.result, "result") or (
        storable.encoded_problem(completion.metadata, "metadata")
    )
    return None if found is None else UnstorableValueError(found, run_id=completion.run_id)


async def complete_many(
    conn: Connection, completions: list[Completion]
) -> list[RunState | LeaseLostError | UnstorableValueError]:
    """Write ``RunCompleted`` for each completion (each run at most once) in one statement
    (``COMPLETE_MANY``; outside a transaction it is its own): the new state, the
    LeaseLostError of an attempt that no longer holds a live lease, or the
    UnstorableValueError of a completion whose result Postgres would refuse (not sent, so
    that it cannot fail the statement of the others), in order."""
    if not completions:
        return []
    results: dict[uuid.UUID, RunState | LeaseLostError | UnstorableValueError] = {}
    pending = {}
    for c in completions:
        refused = completion_problem(c)
        if refused is None:
            pending[c.run_id] = c
        else:
            results[c.run_id] = refused
    for attempt in range(HEAD_CONFLICT_RETRIES + 1):
        if not pending:
            break
        batch = list(pending.values())
        rows = await conn.fetch(
            COMPLETE_MANY,
            [c.run_id for c in batch],
            [c.worker_id for c in batch],
            [c.attempt for c in batch],
            [_result_json(c.result) for c in batch],
            [_metadata_json(c.metadata) for c in batch],
        )
        seen = set()
        for row in rows:
            state = store.row_to_state(row)
            seen.add(state.run_id)
            if row["written"]:
                results[state.run_id] = state
                del pending[state.run_id]
            elif not (row["conflict"] and attempt < HEAD_CONFLICT_RETRIES):
                c = pending.pop(state.run_id)
                problem = fence_problem(state, row["db_now"], c.worker_id, c.attempt) or (
                    f"the run is {state.status}"
                    if state.status is not RunStatus.RUNNING
                    else "a newer transaction wrote the run's stream"
                )
                results[c.run_id] = LeaseLostError(
                    f"write refused: {problem}",
                    run_id=c.run_id,
                    worker_id=c.worker_id,
                    attempt=c.attempt,
                )
        for run_id in [r for r in pending if r not in seen]:
            c = pending.pop(run_id)
            results[run_id] = LeaseLostError(
                "write refused: no such run", run_id=run_id, worker_id=c.worker_id
            )
        if not pending:
            break
    return [results[c.run_id] for c in completions]


async def prepare_run_statements(conn: Connection) -> None:
    """Run the run pool's statements once on ``conn``, with empty arrays (they claim, complete,
    lock and append nothing), before the first run needs them: a fresh connection's first claim
    paid for parsing and planning it and for filling the backend's catalog caches (part of
    the slow first second after a worker starts)."""
    await conn.fetch(CLAIM_MANY, [], [], "", 1.0)
    await conn.fetch(COMPLETE_MANY, [], [], [], [], [])
    await conn.fetch(LOCK_MANY, [])
    await conn.fetch(eventlog.APPEND_MANY, [], [], [], [], [], [], [])


async def fenced_record_many(
    conn: Connection, writes: list[FencedWrite]
) -> list[RunState | LeaseLostError | UnstorableValueError]:
    """:func:`fenced_record` for many runs (each at most once) in one transaction: a write
    whose attempt lost its lease gets its LeaseLostError (in place of a state), a write whose
    event Postgres would refuse (:mod:`awooop.core.storable`) its UnstorableValueError (nothing of
    it is sent), and the others are written."""
    if not writes:
        return []
    rows = await conn.fetch(LOCK_MANY, [w.run_id for w in writes])
    found = {row["run_id"]: row for row in rows}
    results: list[RunState | LeaseLostError | UnstorableValueError] = []
    changes: list[tuple[RunState, Event]] = []
    metas: list[dict[str, Any] | None] = []
    slots: list[int] = []
    for i, write in enumerate(writes):
        row = found.get(write.run_id)
        if row is None:
            results.append(LeaseLostError("write refused: no such run", run_id=write.run_id))
            continue
        state = store.row_to_state(row)
        now: datetime = row["db_now"]
        problem = fence_problem(state, now, write.worker_id, write.attempt)
        if problem is not None:
            results.append(
                LeaseLostError(
                    f"write refused: {problem}",
                    run_id=write.run_id,
                    worker_id=write.worker_id,
                    attempt=write.attempt,
                )
            )
            continue
        event = write.make_event(state, now)
        refused = storable.encoded_problem(event, type(event).__name__)
        if refused is not None:
            results.append(UnstorableValueError(refused, run_id=write.run_id))
            continue
        results.append(state)  # replaced below
        slots.append(i)
        changes.append((state, event))
        metas.append(write.metadata)
    for i, new_state in zip(
        slots, await store.apply_and_store_many(conn, changes, metas), strict=True
    ):
        results[i] = new_state
    return results


async def fail_undeliverable(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    reason: str,
    code: str,
    metadata: dict[str, Any] | None = None,
) -> RunState | None:
    """Fail a run whose work message is being dead-lettered, if nobody is making progress on
    it (dispatchable, or its lease expired); None (nothing written) otherwise."""
    row = await conn.fetchrow(LOCK_ONE, run_id)
    if row is None:
        return None
    state = store.row_to_state(row)
    seen = availability(state, row["db_now"], worker_id)
    if seen not in (Availability.CLAIMABLE, Availability.EXPIRED):
        return None
    event = RunFailed(at=row["db_now"], reason=reason, code=code)
    return await store.apply_and_store(conn, state, event, metadata)


LOCK_ONE = f"""
SELECT {_COLS}, now() AS db_now FROM awooop_run_state WHERE run_id = $1 FOR UPDATE
"""  # noqa: S608 - constant column names
