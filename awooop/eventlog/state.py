"""The run state machine (R-10): one pure function, ``apply(state, event) -> state``.

The log room's writers (:mod:`awooop.eventlog.runs`, :mod:`awooop.eventlog.batches`,
:mod:`awooop.eventlog.ingest`) keep every ``awooop_run_state`` row equal to this function folded
over the run's events, and the replay tool folds the same function, so live and rebuilt run state
cannot drift. It sits in the log room, below ``awooop.runs`` and ``projections``, because the
writers need it: the row's shape and its fold are the log's contract (see WRITERS.md).

An event that is not legal in the current state raises :class:`IllegalTransitionError`
(E-RUN-001); an attempt-scoped event from an attempt that no longer holds the lease raises
:class:`LeaseLostError` (E-RUN-002).
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.errors import (
    ApprovalExpiredError,
    ApprovalRejectedError,
    IllegalTransitionError,
    LeaseLostError,
    MaxAttemptsExceededError,
)
from awooop.core.events import (
    ApprovalExpired,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    ChildrenFinished,
    Event,
    LeaseReleased,
    ModelCalled,
    RunCancelled,
    RunClaimed,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunRequeued,
    RunRetried,
    SignalDelivered,
    StepCompleted,
    TimerFired,
    ToolResultReceived,
    ToolWaitStarted,
    WaitStarted,
    event_type,
)
from awooop.eventlog.wait_state import WAIT_ENDINGS, journaled, waiting_for


class RunStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING_TOOL = "WAITING_TOOL"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    WAITING_EVENT = "WAITING_EVENT"  # asleep, or waiting for a signal: no lease, not reaped
    RESUMED = "RESUMED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
DISPATCHABLE = frozenset({RunStatus.PENDING, RunStatus.RESUMED})
LEASED = frozenset({RunStatus.RUNNING, RunStatus.WAITING_TOOL})

APPROVAL_EXPIRED_CODE = ApprovalExpiredError.code
APPROVAL_REJECTED_CODE = ApprovalRejectedError.code
MAX_ATTEMPTS_REASON = "Max retry attempts exceeded"
MAX_ATTEMPTS_CODE = MaxAttemptsExceededError.code

# Which event types each state accepts (None: no run yet). Anything else is E-RUN-001.
TRANSITIONS: dict[RunStatus | None, frozenset[str]] = {
    None: frozenset({"RunCreated"}),
    RunStatus.PENDING: frozenset({"RunClaimed", "RunCancelled", "RunFailed"}),
    RunStatus.RUNNING: frozenset(
        {
            "StepCompleted",
            "ModelCalled",
            "ToolWaitStarted",
            "ApprovalRequested",
            "WaitStarted",
            "RunCompleted",
            "RunFailed",
            "RunRequeued",
            "LeaseReleased",
            "RunCancelled",
        }
    ),
    # A model call made while a tool call runs (inside ``wait_for_tool``) is recorded too, and
    # so is a tool call started beside another (parallel calls: one wait of the run).
    RunStatus.WAITING_TOOL: frozenset(
        {
            "ToolWaitStarted",
            "ToolResultReceived",
            "ModelCalled",
            "RunFailed",
            "RunRequeued",
            "LeaseReleased",
            "RunCancelled",
        }
    ),
    RunStatus.WAITING_APPROVAL: frozenset(
        {"ApprovalGranted", "ApprovalRejected", "ApprovalExpired", "RunCancelled"}
    ),
    RunStatus.WAITING_EVENT: WAIT_ENDINGS | {"RunCancelled"},
    RunStatus.RESUMED: frozenset({"RunClaimed", "RunCancelled", "RunFailed"}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset({"RunRetried"}),
    RunStatus.CANCELLED: frozenset(),
}


class RunState(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``awooop_run_state``; field names are the column names."""

    run_id: uuid.UUID
    project_id: str
    channel_type: str
    provider_event_id: str
    contract_id: str | None
    status: RunStatus
    version: int
    attempt_count: int
    max_attempts: int
    worker_id: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None
    reaped_at: datetime | None
    failure_reason: str | None
    failure_code: str | None
    saga_steps: dict[str, Any]
    input: Any
    result: Any
    waiting_for: str | None
    approval_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    # The worker whose death, while it held other runs too, made this run a suspect: it runs
    # alone from then on (docs/workers.md, Poison runs). Defaulted: snapshots stored before
    # the column existed still decode.
    suspect_worker_id: str | None = None
    # The concurrency key intake gave the run (RunCreated; migration 0132): its limit's scope,
    # the key and the key's maximum. A run holds a slot of its key while its lease is live.
    concurrency_scope: str | None = None
    concurrency_key: str | None = None
    concurrency_max: int | None = None
    # A child run: its parent, and whether cancelling the parent cancels it (migration 0145).
    parent_run_id: uuid.UUID | None = None
    cancel_with_parent: bool = False


COLUMNS: tuple[str, ...] = RunState.__struct_fields__


def row_to_state(row: Any) -> RunState:
    """A database row (or any mapping with the column names) as a RunState."""
    return msgspec.convert({c: row[c] for c in COLUMNS}, RunState, strict=False)


def state_values(state: RunState) -> tuple[Any, ...]:
    """The row's values in column order: the parameters of insert_run.sql and update_run.sql."""
    return msgspec.structs.astuple(state)


_state_encoder = msgspec.json.Encoder()
_state_decoder = msgspec.json.Decoder(RunState)


def encode_state(state: RunState) -> bytes:
    """The state as JSON: what a stream snapshot keeps (awooop_stream_snapshots.state)."""
    return _state_encoder.encode(state)


def decode_state(data: bytes | str) -> RunState:
    return _state_decoder.decode(data)


def allowed(status: RunStatus | None, type_name: str) -> bool:
    return type_name in TRANSITIONS[status]


def apply(state: RunState | None, event: Event) -> RunState:
    """Return the state after ``event``; raise if the event is illegal in ``state``."""
    name = event_type(event)
    status = state.status if state is not None else None
    if not allowed(status, name):
        raise IllegalTransitionError(
            f"{name} is not allowed when the run is {status or 'absent'}",
            run_id=state.run_id if state else getattr(event, "run_id", None),
            status=status,
            event=name,
        )
    if state is None:
        assert isinstance(event, RunCreated)
        return _created(event)
    _check_fence(state, event)
    version = state.version + 1
    changes = _changes(state, event)
    return msgspec.structs.replace(state, version=version, updated_at=event.at, **changes)


def fold(events: list[Event], state: RunState | None = None) -> RunState | None:
    for event in events:
        state = apply(state, event)
    return state


def _created(event: RunCreated) -> RunState:
    return RunState(
        run_id=event.run_id,
        project_id=event.project_id,
        channel_type=event.channel_type,
        provider_event_id=event.provider_event_id,
        contract_id=event.contract_id,
        status=RunStatus.PENDING,
        version=1,
        attempt_count=0,
        max_attempts=event.max_attempts,
        worker_id=None,
        lease_until=None,
        heartbeat_at=None,
        reaped_at=None,
        failure_reason=None,
        failure_code=None,
        saga_steps={},
        input=event.input,
        result=None,
        waiting_for=None,
        approval_expires_at=None,
        created_at=event.at,
        updated_at=event.at,
        finished_at=None,
        concurrency_scope=event.concurrency_scope,
        concurrency_key=event.concurrency_key,
        concurrency_max=event.concurrency_max,
        parent_run_id=event.parent_run_id,
        cancel_with_parent=event.cancel_with_parent,
    )


def _check_fence(state: RunState, event: Event) -> None:
    # Events written on behalf of an attempt carry (worker_id, attempt); only the attempt that
    # holds the lease may write them.
    if isinstance(event, RunClaimed):
        # A claim opens the next attempt; the caller's conditional lock is the lease check.
        if event.attempt != state.attempt_count + 1:
            raise LeaseLostError(
                "a claim must open the next attempt",
                run_id=state.run_id,
                attempt=event.attempt,
                current_attempt=state.attempt_count,
            )
        return
    worker_id = getattr(event, "worker_id", None)
    attempt = getattr(event, "attempt", None)
    if isinstance(event, RunRequeued) and worker_id is None:
        worker_id = state.worker_id  # stored before RunRequeued named the expired worker
    if attempt is None and worker_id is None:
        return
    if attempt != state.attempt_count or worker_id != state.worker_id:
        raise LeaseLostError(
            run_id=state.run_id,
            attempt=attempt,
            current_attempt=state.attempt_count,
            worker_id=worker_id,
            current_worker_id=state.worker_id,
        )


_RELEASED: dict[str, Any] = {"worker_id": None, "lease_until": None, "heartbeat_at": None}


def decider(event: ApprovalGranted | ApprovalRejected) -> str:
    """Pure: who decided, as a run's failure says it: the person and the token they acted
    with for a decision without the approval token, else the actor."""
    return event.actor if not event.by else f"{event.by} ({event.actor})"


def _finished(event: Event, status: RunStatus) -> dict[str, Any]:
    return {
        **_RELEASED,
        "status": status,
        "finished_at": event.at,
        "waiting_for": None,
        "approval_expires_at": None,
    }


def _changes(state: RunState, event: Event) -> dict[str, Any]:
    match event:
        case RunClaimed():
            return {
                "status": RunStatus.RUNNING,
                "attempt_count": event.attempt,
                "worker_id": event.worker_id,
                "lease_until": event.lease_until,
                "heartbeat_at": event.at,
            }
        case StepCompleted():
            steps = dict(state.saga_steps)
            steps[event.step] = {"attempt": event.attempt, "result": event.result}
            return {"saga_steps": steps}
        case ToolWaitStarted():
            if state.status is RunStatus.WAITING_TOOL:
                return {}  # a call beside one already waited for: the run's wait goes on
            return {"status": RunStatus.WAITING_TOOL, "waiting_for": event.tool}
        case ModelCalled():
            # A record of the attempt's history, fenced like a step: the row keeps nothing of
            # it but the version (the call is read from the run's stream).
            return {}
        case ToolResultReceived():
            if event.others > 0:
                return {}  # answers of parallel calls: the last one makes the run RUNNING
            return {"status": RunStatus.RUNNING, "waiting_for": None}
        case ApprovalRequested():
            return {
                **_RELEASED,
                "status": RunStatus.WAITING_APPROVAL,
                "waiting_for": "approval",
                "approval_expires_at": event.expires_at,
            }
        case ApprovalGranted() | ApprovalRejected(resumed=True) | ApprovalExpired(resumed=True):
            return {"status": RunStatus.RESUMED, "waiting_for": None, "approval_expires_at": None}
        case ApprovalRejected():
            return {
                **_finished(event, RunStatus.FAILED),
                "failure_reason": f"Approval rejected by {decider(event)}: {event.reason}".rstrip(
                    ": "
                ),
                "failure_code": APPROVAL_REJECTED_CODE,
            }
        case ApprovalExpired():
            return {
                **_finished(event, RunStatus.FAILED),
                "failure_reason": "Approval token expired",
                "failure_code": APPROVAL_EXPIRED_CODE,
            }
        case WaitStarted():  # durable sleep and signals: awooop.eventlog.wait_state
            steps = journaled(state.saga_steps, event)
            status = RunStatus.WAITING_EVENT
            return {**_RELEASED, "status": status, "waiting_for": waiting_for(event), **steps}
        case TimerFired() | SignalDelivered() | ChildrenFinished():
            steps = journaled(state.saga_steps, event)
            return {"status": RunStatus.RESUMED, "waiting_for": None, **steps}
        case RunCompleted():
            return {**_finished(event, RunStatus.COMPLETED), "result": event.result}
        case RunFailed():
            return {
                **_finished(event, RunStatus.FAILED),
                "failure_reason": event.reason,
                "failure_code": event.code,
            }
        case RunRequeued():
            requeued: dict[str, Any] = {
                **_RELEASED,
                "status": RunStatus.PENDING,
                "reaped_at": event.at,
                "waiting_for": None,
            }
            if event.suspect:
                # Not charged: the ceiling moves with the attempt (attempt_count is the fence
                # and only grows, as with RunRetried).
                requeued["max_attempts"] = state.max_attempts + 1
                requeued["suspect_worker_id"] = event.worker_id
            return requeued
        case LeaseReleased():
            released: dict[str, Any] = {
                **_RELEASED,
                "status": RunStatus.PENDING,
                "waiting_for": None,
            }
            if not event.charged:
                released["max_attempts"] = state.max_attempts + 1
            return released
        case RunCancelled():
            return {
                **_finished(event, RunStatus.CANCELLED),
                "failure_reason": event.reason or f"Cancelled by {event.actor}",
                "failure_code": None,
            }
        case RunRetried():
            return {
                "status": RunStatus.PENDING,
                "max_attempts": event.max_attempts,
                "failure_reason": None,
                "failure_code": None,
                "finished_at": None,
                "reaped_at": None,
            }
    raise IllegalTransitionError(f"{event_type(event)} does not apply to runs")
