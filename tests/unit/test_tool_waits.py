"""Tool waits of one attempt (awooop.worker.tool_waits): the pure decisions, and the events
they write folded through the state machine (parallel calls are one wait of the run)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from awooop.core.events import StepCompleted, ToolResultReceived
from awooop.eventlog.state import RunStatus, apply
from awooop.worker.tool_waits import (
    RETRY_FIRST_S,
    RETRY_MAX_S,
    Answer,
    Next,
    answer_events,
    decide,
    retry_delay,
)
from tests.support.factories import event_for, state_in

T = datetime(2026, 12, 1, tzinfo=UTC)


def test_an_answer_continues_the_run_only_when_no_other_call_is_out() -> None:
    assert decide(out=0, held=1) is Next.CONTINUE
    assert decide(out=0, held=3) is Next.CONTINUE
    assert decide(out=1, held=1) is Next.HOLD  # a parallel call still runs
    assert decide(out=2, held=2) is Next.HOLD
    assert decide(out=0, held=0) is Next.HOLD  # nothing to write (written by another)


def test_a_refused_readmission_backs_off_doubling_to_a_bound() -> None:
    delays = [retry_delay(i) for i in range(10)]
    assert delays[0] == RETRY_FIRST_S and delays[1] == 2 * RETRY_FIRST_S
    assert delays == sorted(delays) and max(delays) == RETRY_MAX_S
    assert retry_delay(1000) == RETRY_MAX_S and retry_delay(-1) == RETRY_FIRST_S


async def test_parallel_answers_are_one_return_to_running() -> None:
    running = state_in(RunStatus.RUNNING)
    worker, attempt = running.worker_id or "", running.attempt_count
    state = apply(running, event_for("ToolWaitStarted", running))
    assert state.status is RunStatus.WAITING_TOOL and state.waiting_for == "search"
    joined = apply(state, event_for("ToolWaitStarted", state))  # a call beside it
    assert joined.status is RunStatus.WAITING_TOOL and joined.waiting_for == "search"
    loop = asyncio.get_running_loop()
    answers = [
        Answer("a", {"n": 1}, T, loop.create_future()),
        Answer("b", [2], T + timedelta(seconds=1), loop.create_future()),
    ]
    makers = answer_events(answers, worker, attempt)
    events = [make(joined, T) for make in makers]
    assert [type(e) for e in events] == [
        ToolResultReceived,
        ToolResultReceived,
        StepCompleted,
        StepCompleted,
    ]
    statuses = []
    for event in events:
        joined = apply(joined, event)
        statuses.append(joined.status)
    # only the last answer makes the run RUNNING; the steps are journaled after it
    assert statuses == [RunStatus.WAITING_TOOL, *[RunStatus.RUNNING] * 3]
    assert joined.waiting_for is None
    assert joined.saga_steps == {
        "tool:a": {"attempt": attempt, "result": {"n": 1}},
        "tool:b": {"attempt": attempt, "result": [2]},
    }


def test_a_tool_answer_stored_before_others_existed_makes_the_run_running() -> None:
    waiting = state_in(RunStatus.WAITING_TOOL)
    stored = event_for("ToolResultReceived", waiting)
    assert stored.others == 0
    assert apply(waiting, stored).status is RunStatus.RUNNING
