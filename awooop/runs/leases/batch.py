"""Many runs at once (the worker's hot path): claim many, complete many, sleep many, journal
many, fenced writes of many.

The claim, the completion, a sleep's start and journal events are one statement each in the
log room (:mod:`awooop.eventlog.batches`); here is what the worker does with the answer: retry
a run whose stream head a newer transaction wrote (as the transactional path would), and turn a
refusal into the LeaseLostError the fence would have raised.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from awooop.core import storable
from awooop.core.db import Connection
from awooop.core.errors import LeaseLostError, UnstorableValueError
from awooop.core.events import Event
from awooop.eventlog import batches, run_reads
from awooop.eventlog import runs as log_runs
from awooop.eventlog.state import RunState, RunStatus, row_to_state
from awooop.runs.leases.rules import (
    ClaimBatch,
    Completion,
    FencedWrite,
    Journal,
    Sleep,
    completion_problem,
    fence_problem,
    journal_text,
    sleep_problem,
)

HEAD_CONFLICT_RETRIES = 3  # a newer writer of the run's stream committed: write again


async def claim_many(
    conn: Connection,
    run_ids: list[uuid.UUID],
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | list[dict[str, Any] | None] | None = None,
    *,
    fair: bool = True,
    served: batches.Served = batches.EVERY,
) -> ClaimBatch:
    """``claim`` for many runs in one statement (``awooop/eventlog/sql/claim_many.sql``): outside a
    transaction it is its own; inside one it is part of it. ``metadata`` is one dict, or one
    per run id (aligned with ``run_ids``). A run whose stream head a newer transaction wrote
    is claimed again (a few times), as the transactional path would retry it. ``served``: the
    worker's routes and handler version (awooop.runs.routing); a run it may not take comes back
    unclaimed, in ``unserved``."""
    per_run: dict[uuid.UUID, dict[str, Any] | None] = (
        dict(zip(run_ids, metadata, strict=True))
        if isinstance(metadata, list)
        else dict.fromkeys(run_ids, metadata)
    )
    claimed: dict[uuid.UUID, RunState] = {}
    others: dict[uuid.UUID, RunState] = {}
    paused: set[uuid.UUID] = set()
    deferred: set[uuid.UUID] = set()
    unserved: set[uuid.UUID] = set()
    now: datetime | None = None
    wanted = list(run_ids)
    for attempt in range(HEAD_CONFLICT_RETRIES + 1):
        rows = await batches.claim_many(
            conn, wanted, [per_run[r] for r in wanted], worker_id, ttl_s, fair, served
        )
        conflicts = []
        for row in rows:
            now = row.now
            if row.written:
                claimed[row.state.run_id] = row.state
            elif row.conflict and attempt < HEAD_CONFLICT_RETRIES:
                conflicts.append(row.state.run_id)
            else:
                others[row.state.run_id] = row.state
                if row.paused:
                    paused.add(row.state.run_id)
                if row.deferred:
                    deferred.add(row.state.run_id)
                if row.unserved:
                    unserved.add(row.state.run_id)
        if not conflicts:
            break
        wanted = conflicts
    if now is None:
        now = await conn.fetchval("SELECT now()")
    return ClaimBatch(
        claimed, others, now, frozenset(paused), frozenset(deferred), frozenset(unserved)
    )


async def complete_many(
    conn: Connection, completions: list[Completion]
) -> list[LeaseLostError | UnstorableValueError | None]:
    """Write ``RunCompleted`` for each completion (each run at most once) in one statement
    (``awooop/eventlog/sql/complete_many.sql``; outside a transaction it is its own): None
    when written (the row is not read back), the LeaseLostError of an attempt that no longer
    holds a live lease, or the UnstorableValueError of a completion whose result Postgres
    would refuse (not sent, so that it cannot fail the statement of the others), in order."""

    async def send(batch: list[Completion]) -> list[batches.WriteAnswer]:
        return await batches.complete_many(
            conn,
            [c.run_id for c in batch],
            [c.worker_id for c in batch],
            [c.attempt for c in batch],
            [c.result for c in batch],
            [c.metadata for c in batch],
        )

    return await _fenced_statement(completions, completion_problem, send)


async def sleep_many(
    conn: Connection, sleeps: list[Sleep]
) -> list[RunState | LeaseLostError | UnstorableValueError]:
    """Write each sleep's ``WaitStarted`` (each run at most once) in one statement
    (``awooop/eventlog/sql/sleep_many.sql``, with the wait's row; outside a transaction it is
    its own), answered as :func:`complete_many` answers, the new state of each run written
    (the worker's own timers read its due time from it)."""

    async def send(batch: list[Sleep]) -> list[batches.BatchRow]:
        return await batches.sleep_many(
            conn,
            [s.run_id for s in batch],
            [s.worker_id for s in batch],
            [s.attempt for s in batch],
            [s.step for s in batch],
            [s.delay_us for s in batch],
            [s.until for s in batch],
            [s.metadata for s in batch],
        )

    return await _fenced_statement(sleeps, sleep_problem, send)


async def journal_many(
    conn: Connection, writes: list[Journal]
) -> dict[uuid.UUID, LeaseLostError | UnstorableValueError | None]:
    """Write each journal's events (each run at most once) in one statement
    (``awooop/eventlog/sql/journal_many.sql``; outside a transaction it is its own), answered
    by run as :func:`complete_many` answers (None: written). A write it leaves out of the
    answer goes the transactional way (:func:`fenced_record_many`): its run holds the lease in
    another state than RUNNING (a tool wait), or an event it makes is not a journal event."""
    texts: dict[uuid.UUID, str] = {}
    answers: dict[uuid.UUID, LeaseLostError | UnstorableValueError | None] = {}
    for w in writes:
        text = journal_text(w)
        if isinstance(text, str):
            texts[w.run_id] = text
        elif text is not None:
            answers[w.run_id] = text

    async def send(batch: list[Journal]) -> list[batches.WriteAnswer]:
        return await batches.journal_many(
            conn,
            [w.run_id for w in batch],
            [w.worker_id for w in batch],
            [w.attempt for w in batch],
            [texts[w.run_id] for w in batch],
            [w.metadata for w in batch],
        )

    sent = [w for w in writes if w.run_id in texts]
    elsewhere: set[uuid.UUID] = set()
    for w, answer in zip(
        sent, await _fenced_statement(sent, _sendable, send, elsewhere), strict=True
    ):
        if w.run_id not in elsewhere:
            answers[w.run_id] = answer
    return answers


def _sendable(_write: object) -> None:
    """No problem found here (the caller looked before)."""


class _Fenced(Protocol):
    @property
    def run_id(self) -> uuid.UUID: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...


W = TypeVar("W", bound=_Fenced)
A_co = TypeVar("A_co", covariant=True)
A = TypeVar("A")


class _Row(Protocol[A_co]):
    """One run of a one-statement fenced write's answer (:class:`batches.BatchRow`, or
    :class:`batches.WriteAnswer` of a statement that reads no row back)."""

    @property
    def run_id(self) -> uuid.UUID: ...
    @property
    def written(self) -> bool: ...
    @property
    def conflict(self) -> bool: ...
    @property
    def now(self) -> datetime: ...
    @property
    def answer(self) -> A_co: ...
    @property
    def seen(self) -> RunState: ...


async def _fenced_statement(
    writes: list[W],
    problem_of: Callable[[W], UnstorableValueError | None],
    send: Callable[[list[W]], Awaitable[Sequence[_Row[A]]]],
    elsewhere: set[uuid.UUID] | None = None,
) -> list[A | LeaseLostError | UnstorableValueError]:
    """Send ``writes`` (each run at most once) through a one-statement fenced write (``send``)
    and answer each in order: what its row answers when written (its new state, or None from a
    statement that reads no row back), its LeaseLostError when the fence refused it, or the
    UnstorableValueError ``problem_of`` found (not sent). A run whose stream head a newer
    transaction wrote is sent again (a few times), as the transactional path would retry.
    ``elsewhere`` gets the runs refused only because they hold their lease in another state
    than RUNNING (a tool wait), which the transactional write allows; their answer stays the
    refusal."""
    if not writes:
        return []
    results: dict[uuid.UUID, A | LeaseLostError | UnstorableValueError] = {}
    pending: dict[uuid.UUID, W] = {}
    for w in writes:
        refused = problem_of(w)
        if refused is None:
            pending[w.run_id] = w
        else:
            results[w.run_id] = refused
    for attempt in range(HEAD_CONFLICT_RETRIES + 1):
        if not pending:
            break
        rows = await send(list(pending.values()))
        seen = set()
        for row in rows:
            seen.add(row.run_id)
            if row.written:
                results[row.run_id] = row.answer
                del pending[row.run_id]
            elif not (row.conflict and attempt < HEAD_CONFLICT_RETRIES):
                w = pending.pop(row.run_id)
                state = row.seen
                fenced = fence_problem(state, row.now, w.worker_id, w.attempt)
                leased = fenced is None and state.status is not RunStatus.RUNNING
                if leased and elsewhere is not None:
                    elsewhere.add(w.run_id)
                problem = fenced or (
                    f"the run is {state.status}"
                    if state.status is not RunStatus.RUNNING
                    else "a newer transaction wrote the run's stream"
                )
                results[w.run_id] = LeaseLostError(
                    f"write refused: {problem}",
                    run_id=w.run_id,
                    worker_id=w.worker_id,
                    attempt=w.attempt,
                )
        for run_id in [r for r in pending if r not in seen]:
            w = pending.pop(run_id)
            results[run_id] = LeaseLostError(
                "write refused: no such run", run_id=run_id, worker_id=w.worker_id
            )
    return [results[w.run_id] for w in writes]


async def prepare_run_statements(conn: Connection) -> None:
    """Run the run pool's statements once on ``conn``, with empty arrays (they claim, complete,
    lock and append nothing), before the first run needs them: a fresh connection's first claim
    paid for parsing and planning it and for filling the backend's catalog caches (part of
    the slow first second after a worker starts)."""
    await batches.prepare(conn)
    await conn.fetch(run_reads.LOCK_MANY, [])


async def fenced_record_many(
    conn: Connection, writes: list[FencedWrite]
) -> list[RunState | LeaseLostError | UnstorableValueError]:
    """``fenced_record`` for many runs (each at most once) in one transaction: a write
    whose attempt lost its lease gets its LeaseLostError (in place of a state), a write whose
    event Postgres would refuse (:mod:`awooop.core.storable`) its UnstorableValueError (nothing of
    it is sent), and the others are written."""
    if not writes:
        return []
    rows = await conn.fetch(run_reads.LOCK_MANY, [w.run_id for w in writes])
    found = {row["run_id"]: row for row in rows}
    results: list[RunState | LeaseLostError | UnstorableValueError] = []
    changes: list[tuple[RunState, Event | tuple[Event, ...]]] = []
    metas: list[dict[str, Any] | None] = []
    slots: list[int] = []
    for i, write in enumerate(writes):
        row = found.get(write.run_id)
        if row is None:
            results.append(LeaseLostError("write refused: no such run", run_id=write.run_id))
            continue
        state = row_to_state(row)
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
        refused = next(
            (
                problem
                for e in (event if isinstance(event, tuple) else (event,))
                if (problem := storable.encoded_problem(e, type(e).__name__)) is not None
            ),
            None,
        )
        if refused is not None:
            results.append(UnstorableValueError(refused, run_id=write.run_id))
            continue
        results.append(state)  # replaced below
        slots.append(i)
        changes.append((state, event))
        metas.append(write.metadata)
    for i, new_state in zip(
        slots, await log_runs.apply_and_store_many(conn, changes, metas), strict=True
    ):
        results[i] = new_state
    return results
