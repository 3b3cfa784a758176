"""The lease rules as pure decisions: what a row says to a worker, the events that claim or
reap a run, and the fence (see :mod:`awooop.runs.leases` for the rules in words)."""

from __future__ import annotations

import enum
import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import msgspec

from awooop.core import storable
from awooop.core.errors import UnstorableValueError
from awooop.core.events import (
    Event,
    ModelCalled,
    RunClaimed,
    RunFailed,
    RunRequeued,
    StepCompleted,
    WaitStarted,
    encode_event,
)
from awooop.eventlog.state import (
    DISPATCHABLE,
    LEASED,
    MAX_ATTEMPTS_CODE,
    MAX_ATTEMPTS_REASON,
    TERMINAL,
    RunState,
    RunStatus,
)
from awooop.eventlog.wait_state import SLEEP


class Availability(enum.StrEnum):
    """What a run's row says to a worker that holds a message (or a poll result) for it."""

    MISSING = "missing"  # no such run (in this project)
    FINISHED = "finished"  # terminal: nothing left to do
    # no lease; ApprovalGranted (or, WAITING_EVENT, TimerFired or SignalDelivered) dispatches it
    AWAITING_APPROVAL = "awaiting_approval"
    CLAIMABLE = "claimable"  # PENDING or RESUMED, lease empty or expired
    # PENDING or RESUMED, lease empty or expired, and a suspect: only a worker with nothing
    # else in flight takes it (the isolated claim, awooop.worker.isolation)
    SUSPECT = "suspect"
    HELD = "held"  # a live lease of another worker
    HELD_BY_ME = "held_by_me"  # a live lease of this worker
    EXPIRED = "expired"  # RUNNING/WAITING_TOOL with an expired lease: reap, then claim
    # claimable, but its project, channel or contract is paused (awooop.runs.pauses), or its
    # concurrency key is full: the claim statement said so; resuming dispatches it again, a
    # freed slot lets polling take it, so its message is done with
    PAUSED = "paused"
    # claimable, but another project's run is ahead of it in the fair order: the claim
    # statement said so; its message is done with and polling takes the waiting runs in that
    # order (awooop.runs.fairness)
    DEFERRED = "deferred"
    # not of a contract (or project) this worker serves (awooop.runs.routing), or its contract
    # requires handler versions this worker's is not among (awooop.runs.versions): the claim
    # statements never lock it here; its message is done with and the workers that serve it
    # are rung
    UNSERVED = "unserved"


def availability(state: RunState | None, now: datetime, worker_id: str) -> Availability:
    if state is None:
        return Availability.MISSING
    if state.status in TERMINAL:
        return Availability.FINISHED
    if state.status in (RunStatus.WAITING_APPROVAL, RunStatus.WAITING_EVENT):
        return Availability.AWAITING_APPROVAL  # no lease: the approval, timer or signal resumes it
    live = state.lease_until is not None and state.lease_until > now
    if state.status in DISPATCHABLE:
        if live:
            return Availability.HELD
        return Availability.CLAIMABLE if state.suspect_worker_id is None else Availability.SUSPECT
    assert state.status in LEASED
    if not live:
        return Availability.EXPIRED
    return Availability.HELD_BY_ME if state.worker_id == worker_id else Availability.HELD


def claim_event(
    state: RunState, now: datetime, worker_id: str, ttl_s: float, version: str | None = None
) -> RunClaimed:
    """The claim of ``state``'s next attempt, recording the worker's handler ``version``."""
    return RunClaimed(
        at=now,
        worker_id=worker_id,
        attempt=state.attempt_count + 1,
        lease_until=now + timedelta(seconds=ttl_s),
        handler_version=version,
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


def died_sharing(others_leased: int, others_suspected: int) -> bool:
    """Pure: whether a dead worker held other runs besides the one being reaped: runs it still
    holds (their leases expired with it, or not yet), or runs that its death already made
    suspects (the runs of one worker are reaped one by one, by whichever process finds each
    first; a run once suspected keeps the mark, so the last one reaped still sees the first)."""
    return others_leased > 0 or others_suspected > 0


def reap_event(
    state: RunState, now: datetime, *, shared: bool = False, lone_deaths: int = 1
) -> RunRequeued | RunFailed:
    """R-13, R-19: the event for a run whose lease expired. It names the expired attempt and
    its worker.

    ``shared`` (:func:`died_sharing`): the worker held other runs too, so which of them killed
    it is unknown: the run is requeued as a suspect and the death is not charged (whatever
    its attempt count; ``apply`` moves ``max_attempts`` up by one). A suspect runs alone, so
    its next death is not shared. Otherwise the death is the run's own: requeued while
    ``attempt_count < max_attempts``, else FAILED with E-RUN-004, naming the run and how many
    times (``lone_deaths``, this one included) it killed its worker while running alone, and
    it is dead-lettered (``dead_letter``: recorded with the event,
    :mod:`awooop.eventlog.deadletters`)."""
    if shared:
        return RunRequeued(
            at=now,
            attempt=state.attempt_count,
            worker_id=state.worker_id,
            last_renewal_at=state.heartbeat_at,
            reason=(
                f"{lease_expiry(state)}; the worker held other runs too, so this death is "
                "not charged to the run: it runs alone from now on"
            ),
            suspect=True,
        )
    if state.attempt_count < state.max_attempts:
        return RunRequeued(
            at=now,
            attempt=state.attempt_count,
            worker_id=state.worker_id,
            last_renewal_at=state.heartbeat_at,
            reason=lease_expiry(state),
        )
    times = "once" if lone_deaths == 1 else f"{lone_deaths} times"
    return RunFailed(
        at=now,
        reason=(
            f"{MAX_ATTEMPTS_REASON} ({state.attempt_count} of {state.max_attempts}): "
            f"run {state.run_id} killed its worker {times} while running alone; "
            f"{lease_expiry(state)}"
        ),
        code=MAX_ATTEMPTS_CODE,
        worker_id=state.worker_id,
        attempt=state.attempt_count,
        last_renewal_at=state.heartbeat_at,
        dead_letter=True,
    )


class Holder(Protocol):
    """The columns of a run's row that say who holds its lease (a :class:`RunState`, or the
    :class:`Fence` that a notice's check reads)."""

    @property
    def status(self) -> RunStatus: ...
    @property
    def worker_id(self) -> str | None: ...
    @property
    def attempt_count(self) -> int: ...
    @property
    def lease_until(self) -> datetime | None: ...


@dataclass(frozen=True)
class Fence:
    """Who holds a run, as its row says (the columns of :class:`Holder`)."""

    status: RunStatus
    worker_id: str | None
    attempt_count: int
    lease_until: datetime | None


def fence_problem(state: Holder, now: datetime, worker_id: str, attempt: int) -> str | None:
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


class Verdict(enum.StrEnum):
    """What a cancel notice does to an attempt, once the run's row has been read."""

    IGNORE = "ignore"  # the row says this attempt still holds the run: the notice lied
    CANCELLED = "cancelled"  # the run was cancelled: stop the handler
    LOST = "lost"  # the attempt no longer holds the run (reaped, taken, finished)


def notice_verdict(
    fence: Fence | None, now: datetime, worker_id: str, attempt: int
) -> tuple[Verdict, str]:
    """Pure: a cancel notice is a doorbell, never an order. Any database login can send one
    (``pg_notify`` needs no privilege), so the attempt stops only for what the row says."""
    if fence is None:
        return Verdict.LOST, "the run is gone"
    if fence.status is RunStatus.CANCELLED:
        return Verdict.CANCELLED, "the run was cancelled"
    problem = fence_problem(fence, now, worker_id, attempt)
    if problem is not None:
        return Verdict.LOST, problem
    return Verdict.IGNORE, "the attempt still holds the run"


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


@dataclass(frozen=True)
class FencedWrite:
    """One event (or several, in order: a model call and the step it answers) to write on
    behalf of ``(worker_id, attempt)``, under one check of the fence (see ``fenced_record``)."""

    run_id: uuid.UUID
    worker_id: str
    attempt: int
    make_event: Callable[[RunState, datetime], Event | tuple[Event, ...]]
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Sleep(FencedWrite):
    """A sleep's ``WaitStarted`` to write on behalf of ``(worker_id, attempt)``: the wait
    ``step``, due ``delay`` after the database clock at the write or at ``until`` (which wins;
    either way the due time is journaled in UTC).
    A fenced write whose event is :meth:`event`, which the worker writes as one statement for
    many runs (``batch.sleep_many``, ``sleep_many.sql``: that event applied, in SQL)."""

    make_event: Callable[[RunState, datetime], Event] = field(init=False, repr=False, compare=False)
    step: str
    delay: timedelta | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "make_event", self.event)

    def event(self, _state: RunState, at: datetime) -> WaitStarted:
        if self.until is not None:
            due = self.until
        else:
            assert self.delay is not None
            due = at + self.delay
        return WaitStarted(
            at=at,
            worker_id=self.worker_id,
            attempt=self.attempt,
            step=self.step,
            kind=SLEEP,
            due_at=due.astimezone(UTC),  # journaled in UTC, as sleep_many.sql writes it
        )

    @property
    def delay_us(self) -> int | None:
        """The delay in whole microseconds (None when ``until`` gives the due time)."""
        if self.until is not None or self.delay is None:
            return None
        return self.delay // timedelta(microseconds=1)


# The events a Journal may hold: apply() changes nothing of a run for them but its version, its
# clock and (StepCompleted) the step's entry, which journal_many.sql writes in SQL.
JOURNAL_EVENTS = (ModelCalled, StepCompleted)
# The clock a Journal's events are made at: each is written with the write's clock as its
# ``at`` (the database's), whichever way it is written.
JOURNAL_CLOCK = datetime(1970, 1, 1, tzinfo=UTC)


def _journal_at(events: tuple[Event, ...], _state: RunState, at: datetime) -> tuple[Event, ...]:
    return tuple(msgspec.structs.replace(e, at=at) for e in events)


@dataclass(frozen=True, kw_only=True)
class Journal(FencedWrite):
    """Journal events of ``(worker_id, attempt)`` (:data:`JOURNAL_EVENTS`: a model call and
    the step it answers, a step's result), made at :data:`JOURNAL_CLOCK` and written with the
    write's clock as their ``at``, whatever the run's state. A fenced write that the worker
    writes as one statement for many runs (``batch.journal_many``, ``journal_many.sql``: those
    events applied, in SQL) while the run is RUNNING, and as any other fenced write when it is
    not (a tool wait): the same events either way, since only ``at`` takes the clock."""

    make_event: Callable[[RunState, datetime], Event | tuple[Event, ...]] = field(
        init=False, repr=False, compare=False
    )
    events: tuple[Event, ...]

    def __post_init__(self) -> None:
        # A partial of the events, not a bound method of the write: no reference cycle.
        object.__setattr__(self, "make_event", functools.partial(_journal_at, self.events))


def journal_text(write: Journal) -> str | UnstorableValueError | None:
    """Pure: ``write``'s events as ``journal_many.sql`` takes them (a JSON array; the statement
    puts each one's ``at`` in), the error for one that Postgres would refuse
    (:mod:`awooop.core.storable`), or None when one is not a journal event (the write goes the
    transactional way)."""
    if not all(isinstance(e, JOURNAL_EVENTS) for e in write.events):
        return None
    encoded: list[bytes] = []
    for e in write.events:
        try:
            data = encode_event(e)
        except UnicodeEncodeError:
            data = b"\\u0000"  # not encodable as it is: storable says where and why
        if b"\\u0000" in data:
            problem = storable.encoded_problem(e, type(e).__name__)
            if problem is not None:
                return UnstorableValueError(problem, run_id=write.run_id)
        encoded.append(data)
    return "[" + ",".join(d.decode() for d in encoded) + "]"


def sleep_problem(sleep: Sleep) -> UnstorableValueError | None:
    """Pure: the error for a sleep whose step or metadata Postgres would refuse
    (:mod:`awooop.core.storable`); None when it can be written."""
    found = storable.encoded_problem(sleep.step, "step") or (
        storable.encoded_problem(sleep.metadata, "metadata")
    )
    return None if found is None else UnstorableValueError(found, run_id=sleep.run_id)


@dataclass(frozen=True)
class Taken:
    """The outcome of taking an expired run: the reap event applied and, if requeued, not a
    suspect and not paused, the claim (``state`` is then RUNNING under the new attempt). A
    suspect is left PENDING for an isolated claim, a paused run until it is resumed."""

    state: RunState
    reaped: RunRequeued | RunFailed
    claimed: bool


@dataclass(frozen=True)
class ClaimBatch:
    """What ``claim_many`` found: the runs it claimed, the committed state of the others
    (read without a lock, so that the caller can tell finished from held from unknown), the
    database clock, the runs a pause (or a full key) held back (claimable otherwise), those
    of them the fair order deferred, and the runs the worker may not take (its routes or its
    handler version: ``_run_served.sql``)."""

    claimed: dict[uuid.UUID, RunState]
    others: dict[uuid.UUID, RunState]
    now: datetime
    paused: frozenset[uuid.UUID] = frozenset()
    deferred: frozenset[uuid.UUID] = frozenset()
    unserved: frozenset[uuid.UUID] = frozenset()
