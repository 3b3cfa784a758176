"""Exhaustive table of the run state machine (R-10): every state x every event type."""

from __future__ import annotations

import pytest

from awooop.core.errors import IllegalTransitionError, LeaseLostError
from awooop.core.events import RUN_EVENT_TYPES
from awooop.eventlog.state import RunStatus, apply
from tests.support.factories import created, event_for, replace, state_in

S = RunStatus
# The specification, written out independently of awooop.eventlog.state.TRANSITIONS:
# (state, event type) -> resulting status. Every pair not listed must be refused.
EXPECTED: dict[tuple[RunStatus | None, str], RunStatus] = {
    (None, "RunCreated"): S.PENDING,
    (S.PENDING, "RunClaimed"): S.RUNNING,
    (S.PENDING, "RunCancelled"): S.CANCELLED,
    (S.PENDING, "RunFailed"): S.FAILED,
    (S.RUNNING, "StepCompleted"): S.RUNNING,
    (S.RUNNING, "ModelCalled"): S.RUNNING,
    (S.RUNNING, "ToolWaitStarted"): S.WAITING_TOOL,
    (S.RUNNING, "ApprovalRequested"): S.WAITING_APPROVAL,
    (S.RUNNING, "RunCompleted"): S.COMPLETED,
    (S.RUNNING, "RunFailed"): S.FAILED,
    (S.RUNNING, "RunRequeued"): S.PENDING,
    (S.RUNNING, "LeaseReleased"): S.PENDING,
    (S.RUNNING, "RunCancelled"): S.CANCELLED,
    (S.WAITING_TOOL, "ToolWaitStarted"): S.WAITING_TOOL,
    (S.WAITING_TOOL, "ToolResultReceived"): S.RUNNING,
    (S.WAITING_TOOL, "ModelCalled"): S.WAITING_TOOL,
    (S.WAITING_TOOL, "RunFailed"): S.FAILED,
    (S.WAITING_TOOL, "RunRequeued"): S.PENDING,
    (S.WAITING_TOOL, "LeaseReleased"): S.PENDING,
    (S.WAITING_TOOL, "RunCancelled"): S.CANCELLED,
    (S.WAITING_APPROVAL, "ApprovalGranted"): S.RESUMED,
    (S.WAITING_APPROVAL, "ApprovalRejected"): S.FAILED,
    (S.WAITING_APPROVAL, "ApprovalExpired"): S.FAILED,
    (S.WAITING_APPROVAL, "RunCancelled"): S.CANCELLED,
    (S.RESUMED, "RunClaimed"): S.RUNNING,
    (S.RESUMED, "RunCancelled"): S.CANCELLED,
    (S.RESUMED, "RunFailed"): S.FAILED,
    (S.FAILED, "RunRetried"): S.PENDING,
}

STATES: list[RunStatus | None] = [None, *RunStatus]
TYPES = [t.__name__ for t in RUN_EVENT_TYPES]


@pytest.mark.parametrize("status", STATES, ids=lambda s: str(s))
@pytest.mark.parametrize("type_name", TYPES)
def test_every_state_and_event_pair(status: RunStatus | None, type_name: str) -> None:
    state = None if status is None else state_in(status)
    event = event_for(type_name, state)
    expected = EXPECTED.get((status, type_name))
    if expected is None:
        with pytest.raises(IllegalTransitionError) as info:
            apply(state, event)
        assert info.value.code == "E-RUN-001"
    else:
        new = apply(state, event)
        assert new.status == expected
        assert new.version == (1 if state is None else state.version + 1)
        assert new.updated_at == event.at


def test_claim_sets_the_lease_and_counts_the_attempt() -> None:
    pending = state_in(S.PENDING)
    claim = event_for("RunClaimed", pending)
    running = apply(pending, claim)
    assert (running.worker_id, running.attempt_count, running.lease_until) == (
        claim.worker_id,
        1,
        claim.lease_until,
    )
    assert running.heartbeat_at == claim.at


def test_an_attempt_that_lost_its_lease_is_fenced() -> None:
    running = state_in(S.RUNNING)
    stale = replace(running, attempt_count=running.attempt_count + 1, worker_id="worker-b")
    for name in (
        "StepCompleted",
        "ModelCalled",
        "RunCompleted",
        "ApprovalRequested",
        "LeaseReleased",
    ):
        with pytest.raises(LeaseLostError):
            apply(stale, event_for(name, running))


def test_a_claim_must_open_the_next_attempt() -> None:
    pending = state_in(S.PENDING)
    claim = event_for("RunClaimed", pending)
    with pytest.raises(LeaseLostError):
        apply(replace(pending, attempt_count=5), claim)


def test_terminal_states_clear_the_lease_and_record_the_reason() -> None:
    failed = state_in(S.FAILED)
    assert failed.failure_reason == "boom" and failed.finished_at is not None
    completed = state_in(S.COMPLETED)
    assert completed.worker_id is None and completed.lease_until is None
    assert completed.result == "done"


def test_approval_expiry_fails_with_its_code() -> None:
    waiting = state_in(S.WAITING_APPROVAL)
    assert waiting.worker_id is None and waiting.lease_until is None
    failed = apply(waiting, event_for("ApprovalExpired", waiting))
    assert failed.failure_code == "E-APPROVAL-002"


def test_steps_are_journaled_by_name() -> None:
    running = state_in(S.RUNNING)
    after = apply(running, event_for("StepCompleted", running))
    assert after.saga_steps == {"s1": {"attempt": 1, "result": {"n": 1}}}


def test_a_model_call_moves_only_the_version() -> None:
    for status in (S.RUNNING, S.WAITING_TOOL):
        before = state_in(status)
        after = apply(before, event_for("ModelCalled", before))
        assert after == replace(before, version=before.version + 1, updated_at=after.updated_at)


def test_retry_keeps_attempts_monotonic_and_raises_the_ceiling() -> None:
    pending = apply(None, created(max_attempts=1))
    running = apply(pending, event_for("RunClaimed", pending))
    failed = apply(running, event_for("RunFailed", running))
    retried = apply(failed, event_for("RunRetried", failed))
    assert retried.attempt_count == 1 and retried.max_attempts == 4
    assert retried.failure_reason is None and retried.finished_at is None
