"""Exhaustive table of the run state machine (R-10): every state x every event type."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awooop.core import events as ev
from awooop.core.errors import IllegalTransitionError, LeaseLostError
from awooop.core.events import RUN_EVENT_TYPES
from awooop.eventlog import wait_state
from awooop.eventlog.state import RunStatus, apply
from tests.support.factories import T0, created, event_for, replace, state_in

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
    (S.RUNNING, "WaitStarted"): S.WAITING_EVENT,
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
    (S.WAITING_EVENT, "TimerFired"): S.RESUMED,
    (S.WAITING_EVENT, "SignalDelivered"): S.RESUMED,
    (S.WAITING_EVENT, "ChildrenFinished"): S.RESUMED,
    (S.WAITING_EVENT, "RunCancelled"): S.CANCELLED,
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
        "WaitStarted",
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


def test_a_wait_journals_its_due_time_releases_the_lease_and_ends_once() -> None:
    running = state_in(S.RUNNING)
    started = event_for("WaitStarted", running)
    waiting = apply(running, started)
    assert (waiting.worker_id, waiting.lease_until, waiting.waiting_for) == (None, None, "sleep")
    entry = waiting.saga_steps["sleep:1"]
    assert wait_state.due_of(entry) == started.due_at and wait_state.ended(entry) is None
    resumed = apply(waiting, event_for("TimerFired", waiting))
    assert resumed.status == S.RESUMED and resumed.waiting_for is None
    assert wait_state.ended(resumed.saga_steps["sleep:1"]) == "fired"
    with pytest.raises(IllegalTransitionError):  # a second end of the same wait
        apply(resumed, event_for("SignalDelivered", resumed))


def test_an_event_wait_records_the_signal_or_the_timeout() -> None:
    running = state_in(S.RUNNING)
    started = ev.WaitStarted(
        at=T0,
        worker_id=running.worker_id or "",
        attempt=1,
        step="event:go:1",
        kind="event",
        name="go",
        match={"a": 1},
        due_at=T0 + timedelta(seconds=5),
    )
    waiting = apply(running, started)
    assert waiting.waiting_for == "event go"
    signalled = apply(waiting, event_for("SignalDelivered", waiting))
    entry = signalled.saga_steps["event:go:1"]
    assert wait_state.ended(entry) == "signal" and entry["result"] == [2]
    timed_out = apply(waiting, ev.TimerFired(at=T0, step="event:go:1", kind="event", due_at=T0))
    assert wait_state.ended(timed_out.saga_steps["event:go:1"]) == "timeout"


@pytest.mark.parametrize(
    ("payload", "match", "contained"),
    [
        ({"a": 1, "b": [1, 2]}, {"a": 1}, True),
        ({"a": 1, "b": [1, 2]}, {"b": [2]}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}, True),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": True}, {"a": 1}, False),
        ({"a": "1"}, {"a": 1}, False),
        ([1, 2], {"a": 1}, False),
        ({}, {}, True),
    ],
)
def test_match_is_jsonb_containment(payload: object, match: object, contained: bool) -> None:
    assert wait_state.contains(payload, match) is contained
