"""Sample events and states for tests: one legal example of every run event type."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from awooop.core import events as ev
from awooop.eventlog.state import RunState, RunStatus, apply

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKER = "worker-a"


def created(
    run_id: uuid.UUID | None = None,
    project_id: str = "p1",
    at: datetime = T0,
    max_attempts: int = 3,
) -> ev.RunCreated:
    rid = run_id or uuid.uuid4()
    return ev.RunCreated(
        at=at,
        run_id=rid,
        project_id=project_id,
        channel_type="api",
        provider_event_id=str(rid),
        input={"text": "hi"},
        max_attempts=max_attempts,
    )


SIGNAL_ID = uuid.UUID("0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa")


def event_for(type_name: str, state: RunState | None, at: datetime = T0) -> Any:
    """A sample event of ``type_name`` that is well-formed for ``state`` (fence satisfied)."""
    worker = state.worker_id if state and state.worker_id else WORKER
    attempt = state.attempt_count if state else 0
    common: dict[str, Any] = {"at": at}
    attempt_scoped = {"worker_id": worker, "attempt": attempt}
    samples: dict[str, Any] = {
        "RunCreated": lambda: created(at=at),
        "RunClaimed": lambda: ev.RunClaimed(
            **common, worker_id=WORKER, attempt=attempt + 1, lease_until=at + timedelta(seconds=30)
        ),
        "StepCompleted": lambda: ev.StepCompleted(
            **common, **attempt_scoped, step="s1", result={"n": 1}
        ),
        "ToolWaitStarted": lambda: ev.ToolWaitStarted(**common, **attempt_scoped, tool="search"),
        "ToolResultReceived": lambda: ev.ToolResultReceived(
            **common, **attempt_scoped, tool="search", result=[1]
        ),
        "ModelCalled": lambda: ev.ModelCalled(
            **common,
            **attempt_scoped,
            contract_family="policy_routing",
            contract_id="default",
            model="m1",
            revision_id=None,
            body_hash=None,
            started_at=at,
            duration_ms=12.5,
            outcome="ok",
        ),
        "ApprovalRequested": lambda: ev.ApprovalRequested(
            **common, **attempt_scoped, expires_at=at + timedelta(minutes=15)
        ),
        "ApprovalGranted": lambda: ev.ApprovalGranted(**common, actor="alice"),
        "ApprovalRejected": lambda: ev.ApprovalRejected(**common, actor="bob", reason="no"),
        "ApprovalExpired": lambda: ev.ApprovalExpired(**common),
        "WaitStarted": lambda: ev.WaitStarted(
            **common, **attempt_scoped, step="sleep:1", kind="sleep", due_at=at + timedelta(1)
        ),
        "TimerFired": lambda: ev.TimerFired(
            **common, step="sleep:1", kind="sleep", due_at=at + timedelta(1)
        ),
        "SignalDelivered": lambda: ev.SignalDelivered(
            **common, step="event:go:1", name="go", signal_id=SIGNAL_ID, key="k1", payload=[2]
        ),
        "ChildrenFinished": lambda: ev.ChildrenFinished(
            **common,
            step="children:1",
            results=[{"run_id": str(SIGNAL_ID), "key": "a", "status": "COMPLETED", "result": 1}],
            finished=1,
        ),
        "RunCompleted": lambda: ev.RunCompleted(**common, **attempt_scoped, result="done"),
        "RunFailed": lambda: ev.RunFailed(**common, reason="boom", code="E-HANDLER-001"),
        "RunRequeued": lambda: ev.RunRequeued(**common, attempt=attempt),
        "LeaseReleased": lambda: ev.LeaseReleased(**common, **attempt_scoped),
        "RunCancelled": lambda: ev.RunCancelled(**common, actor="ops", reason="stop"),
        "RunRetried": lambda: ev.RunRetried(**common, actor="ops", max_attempts=attempt + 3),
    }
    return samples[type_name]()


# A path of legal events from nothing to each state.
PATHS: dict[RunStatus, list[str]] = {
    RunStatus.PENDING: ["RunCreated"],
    RunStatus.RUNNING: ["RunCreated", "RunClaimed"],
    RunStatus.WAITING_TOOL: ["RunCreated", "RunClaimed", "ToolWaitStarted"],
    RunStatus.WAITING_APPROVAL: ["RunCreated", "RunClaimed", "ApprovalRequested"],
    RunStatus.WAITING_EVENT: ["RunCreated", "RunClaimed", "WaitStarted"],
    RunStatus.RESUMED: ["RunCreated", "RunClaimed", "ApprovalRequested", "ApprovalGranted"],
    RunStatus.COMPLETED: ["RunCreated", "RunClaimed", "RunCompleted"],
    RunStatus.FAILED: ["RunCreated", "RunFailed"],
    RunStatus.CANCELLED: ["RunCreated", "RunCancelled"],
}


def state_in(status: RunStatus) -> RunState:
    state: RunState | None = None
    for name in PATHS[status]:
        state = apply(state, event_for(name, state))
    assert state is not None and state.status == status
    return state


def replace(state: RunState, **changes: Any) -> RunState:
    return msgspec.structs.replace(state, **changes)
