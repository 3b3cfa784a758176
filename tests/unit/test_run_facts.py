"""The facts a failed or running attempt leaves for operators (pure parts): which step an
exception left (awooop.worker.attempts), what a renewal reports (awooop.worker.heartbeat),
which failure failed a run (awooop.projections.failures)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec

from awooop.core.events import (
    LeaseReleased,
    RunCompleted,
    RunFailed,
    StepCompleted,
    encode_event,
)
from awooop.eventlog.eventlog import RecordedEvent
from awooop.eventlog.state import RunState, RunStatus
from awooop.projections.base import LogEvent
from awooop.projections.failures import failed_by, failures
from awooop.projections.timeline import entries, timeline_lines
from awooop.worker.attempts import Attempt, causes
from awooop.worker.heartbeat import STEP_NAME_CHARS, current_steps

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RUN = uuid.UUID("00000000-0000-4000-8000-000000000001")


def attempt() -> Attempt:
    return Attempt(run_id=RUN, project_id="p", worker_id="w1", number=1, lease_deadline=0.0)


def test_an_exception_names_the_innermost_step_it_left() -> None:
    a = attempt()
    outer = a.enter_step("outer")
    inner = a.enter_step("inner")
    assert (a.step, a.step_started_at is not None) == ("inner", True)
    exc = KeyError("sku")
    a.step_raised(exc, "inner")
    a.leave_step(inner)
    a.step_raised(exc, "outer")  # the same exception leaving the outer step too
    a.leave_step(outer)
    assert (a.step, a.step_started_at) == (None, None)
    assert a.step_of(exc) == "inner"
    # raised from it, outside every step: still the step where it began
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = exc
    assert a.step_of(wrapped) == "inner"
    # an unrelated exception was raised outside every step
    assert a.step_of(ValueError("later")) is None


def test_a_new_exception_in_an_outer_step_names_the_outer_step() -> None:
    a = attempt()
    a.step_raised(KeyError("caught by the handler"), "first")
    other = ValueError("x")
    a.step_raised(other, "second")
    assert a.step_of(other) == "second"


def test_causes_walks_a_chain_once_even_when_it_loops() -> None:
    first, second = ValueError("a"), KeyError("b")
    first.__context__ = second
    second.__context__ = first
    assert causes(first) == [first, second]


def test_a_renewal_reports_the_steps_storable_and_bounded() -> None:
    a, b, idle = attempt(), attempt(), attempt()
    a.enter_step("reserve_stock")
    b.enter_step("bad\x00" + "n" * 500)
    run_a, run_b, run_idle = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    steps = current_steps({run_a: a, run_b: b, run_idle: idle})
    assert set(steps) == {run_a, run_b}
    assert steps[run_a] == ("reserve_stock", a.step_started_at)
    name, _ = steps[run_b]
    assert name.startswith("bad\\u0000") and len(name) == STEP_NAME_CHARS


def recorded(version: int, event: object) -> RecordedEvent:
    return RecordedEvent(
        position=version,
        tx_id=1,
        event_id=uuid.uuid4(),
        stream_id=f"run-{RUN}",
        version=version,
        project_id="p",
        event_type=type(event).__name__,
        data=encode_event(event).decode(),  # type: ignore[arg-type]
        metadata={},
        recorded_at=T0,
    )


def state(status: RunStatus, code: str | None, reason: str | None) -> RunState:
    return RunState(
        run_id=RUN,
        project_id="p",
        channel_type="api",
        provider_event_id="k",
        contract_id=None,
        status=status,
        version=5,
        attempt_count=2,
        max_attempts=3,
        worker_id=None,
        lease_until=None,
        heartbeat_at=None,
        reaped_at=None,
        failure_reason=reason,
        failure_code=code,
        saga_steps={},
        input={},
        result=None,
        waiting_for=None,
        approval_expires_at=None,
        created_at=T0,
        updated_at=T0,
        finished_at=None,
        suspect_worker_id=None,
    )


def test_failures_list_the_given_back_attempts_with_a_traceback_and_the_failure() -> None:
    events = [
        recorded(2, LeaseReleased(at=T0, worker_id="w1", attempt=1, charged=False)),
        recorded(
            3,
            LeaseReleased(
                at=T0, worker_id="w1", attempt=2, charged=False, reason="away", traceback="TB1"
            ),
        ),
        recorded(4, RunCompleted(at=T0, worker_id="w1", attempt=3)),
        recorded(
            5,
            RunFailed(
                at=T0,
                reason="KeyError: 'sku'",
                code="E-RUN-003",
                worker_id="w1",
                attempt=3,
                traceback="TB2",
                step="reserve_stock",
            ),
        ),
    ]
    lines = failures(events)
    assert [(f.version, f.retried, f.step, f.traceback) for f in lines] == [
        (3, True, None, "TB1"),
        (5, False, "reserve_stock", "TB2"),
    ]
    failed = state(RunStatus.FAILED, "E-RUN-003", "KeyError: 'sku'")
    got = failed_by(failed, lines)
    assert got is not None and got.version == 5
    # failed otherwise since (an approval rejected after a retry), or not failed now: none
    assert failed_by(msgspec.structs.replace(failed, failure_code="E-APPROVAL-001"), lines) is None
    assert failed_by(state(RunStatus.RUNNING, None, None), lines) is None


def test_the_projectors_timeline_leaves_out_fields_an_older_release_cannot_fold() -> None:
    step = StepCompleted(at=T0, worker_id="w1", attempt=1, step="fetch", result=[1], started_at=T0)
    failed = RunFailed(at=T0, reason="boom", code="E-HANDLER-001", traceback="TB", step="fetch")
    rows = [recorded(1, step), recorded(2, failed)]
    projected, _ = entries(None, [LogEvent.from_recorded(r) for r in rows])
    assert projected[0].detail == {"step": "fetch"}
    assert projected[1].detail == {"reason": "boom", "code": "E-HANDLER-001", "dead_letter": False}
    # the run page's lines, folded from the stream, have them (never the traceback)
    lines = timeline_lines(rows)
    assert lines[0].detail == {"step": "fetch", "started_at": T0.isoformat().replace("+00:00", "Z")}
    assert lines[1].detail["step"] == "fetch" and "traceback" not in lines[1].detail
