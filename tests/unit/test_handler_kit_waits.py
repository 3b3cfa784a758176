"""awooop.testing.HandlerKit with durable waits: ``run.sleep`` / ``sleep_until`` suspend the run
until ``kit.advance`` reaches the due time, ``run.wait_for_event`` takes a signal sent before
the wait, during it (``kit.signal``, once per key, by ``match``) or raises E-SIGNAL-001 at its
timeout, with the runtime's journal (the steps, due times, ends) and its replay."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from awooop.core.errors import (
    DatabaseUnavailableError,
    EventWaitTimeoutError,
    InvalidInputError,
    PayloadTooLargeError,
    SignalLimitError,
    SignalRunFinishedError,
)
from awooop.eventlog.state import RunStatus
from awooop.testing import Clock, HandlerKit, Journal
from awooop.worker.context import RunContext

DONE: list[str] = []  # side effects


async def remind_later(run: RunContext) -> dict[str, Any]:
    """Places an order, sleeps an hour, then waits up to a day for ``paid`` of that order."""

    async def place() -> str:
        DONE.append("placed")
        return "o-7"

    order = await run.step("place", place)
    await run.sleep(timedelta(hours=1))
    try:
        paid = await run.wait_for_event("paid", timeout=timedelta(days=1), match={"order": order})
    except EventWaitTimeoutError:
        return {"order": order, "paid": None}
    return {"order": order, "paid": paid["amount"]}


@pytest.fixture(autouse=True)
def _nothing_done() -> None:
    DONE.clear()


async def test_a_sleep_suspends_the_run_until_the_clock_reaches_its_due_time() -> None:
    clock = Clock()
    start = clock.now()
    kit = HandlerKit(remind_later, clock=clock)
    asleep = await kit.run()
    assert asleep.status is RunStatus.WAITING_EVENT and asleep.waiting_for == "sleep"
    assert asleep.state.worker_id is None and asleep.state.lease_until is None
    [started] = asleep.journal.waits
    assert started.step == "sleep:1" and started.due_at == start + timedelta(hours=1)
    assert asleep.state.saga_steps["sleep:1"]["due_at"] == (start + timedelta(hours=1)).isoformat()
    kit.advance(timedelta(minutes=59))
    assert kit.state.status is RunStatus.WAITING_EVENT  # not due yet
    assert (await kit.resume()).status is RunStatus.WAITING_EVENT  # nothing to run
    kit.advance(60)
    assert kit.state.status is RunStatus.RESUMED
    waiting = await kit.resume()
    assert waiting.waiting_for == "event paid"
    assert [type(e).__name__ for e in waiting.journal.waits] == [
        "WaitStarted",
        "TimerFired",
        "WaitStarted",
    ]
    sent = kit.signal("paid", {"order": "o-7", "amount": 12}, key="pay-1")
    assert sent.delivered and not sent.duplicate
    result = await kit.resume()
    assert result.value == {"order": "o-7", "paid": 12}
    assert result.attempts == 3 and DONE == ["placed"]  # the step ran once
    assert result.state.saga_steps["event:paid:1"]["ended"] == "signal"


async def test_a_signal_is_kept_until_its_wait_and_counted_once_per_key() -> None:
    kit = HandlerKit(remind_later)
    await kit.run()
    other = kit.signal("paid", {"order": "o-8", "amount": 1}, key="a")  # no match: kept
    sent = kit.signal("paid", {"order": "o-7", "amount": 5}, key="b")
    again = kit.signal("paid", {"order": "o-7", "amount": 99}, key="b")
    assert not other.delivered and not sent.delivered  # asleep: no event wait to take them
    assert again.duplicate and again.signal_id == sent.signal_id
    kit.advance(3600)
    result = await kit.resume()
    assert result.value == {"order": "o-7", "paid": 5}  # taken at once when the wait started
    assert "SignalDelivered" not in result.journal.types
    assert result.journal.step_events[-1].step == "event:paid:1"
    assert "event:paid:1" not in result.journal.steps  # not one of the handler's steps
    assert [s.delivered_at is not None for s in kit.signals.sent] == [False, True]


async def test_an_event_wait_times_out_with_the_typed_error() -> None:
    kit = HandlerKit(remind_later)
    await kit.run()
    kit.advance(3600)
    await kit.resume()
    kit.advance(timedelta(days=1) - timedelta(seconds=1))
    assert kit.state.status is RunStatus.WAITING_EVENT
    kit.advance(1)
    result = await kit.resume()
    assert result.value == {"order": "o-7", "paid": None}
    assert result.state.saga_steps["event:paid:1"]["ended"] == "timeout"
    with pytest.raises(SignalRunFinishedError) as finished:  # a finished run takes none
        kit.signal("paid", {"order": "o-7", "amount": 5}, key="late")
    assert finished.value.code == "E-SIGNAL-002"


async def test_an_uncaught_timeout_fails_the_run_with_e_signal_001() -> None:
    async def strict(run: RunContext) -> Any:
        return await run.wait_for_event("approved", timeout=timedelta(minutes=5))

    kit = HandlerKit(strict)
    waiting = await kit.run()
    assert waiting.state.saga_steps["event:approved:1"]["due_at"] is not None
    kit.advance(300)
    result = await kit.resume()
    assert result.status is RunStatus.FAILED and result.failure_code == "E-SIGNAL-001"
    with pytest.raises(EventWaitTimeoutError):
        _ = result.value


async def test_sleep_until_and_a_replayed_attempt_never_sleep_again() -> None:
    clock = Clock()
    calls: list[int] = []

    async def nightly(run: RunContext) -> int:
        await run.sleep_until(clock.now().replace(hour=2), name="night")
        await run.sleep(timedelta(0))  # nothing to wait for: journals nothing
        calls.append(run.attempt)
        if run.attempt == 2:
            raise DatabaseUnavailableError("the database went away (test)")  # handed back
        return run.attempt

    kit = HandlerKit(nightly, clock=clock)
    assert (await kit.run()).waiting_for == "sleep"
    kit.advance(timedelta(hours=2))
    result = await kit.resume()
    assert result.value == 3 and calls == [2, 3]  # attempt 3 did not sleep again
    assert [e.step for e in result.journal.waits] == ["sleep:night", "sleep:night"]
    naive = await HandlerKit(lambda run: run.sleep_until(datetime(2026, 1, 2))).run()
    assert naive.failure_code == "E-INPUT-001" and naive.journal.waits == []


async def test_a_recorded_journal_of_waits_replays_without_waiting() -> None:
    kit = HandlerKit(remind_later)
    await kit.run()
    kit.advance(3600)
    await kit.resume()
    kit.signal("paid", {"order": "o-7", "amount": 3}, key="k")
    recorded = Journal.from_json((await kit.resume()).journal.to_json())
    report = await HandlerKit(remind_later).replay(recorded)
    assert report.result.value == {"order": "o-7", "paid": 3}
    assert report.replayed == ["place", "sleep:1", "event:paid:1"] and report.ran == []
    assert report.unused == []
    waiting = await HandlerKit(remind_later).run()
    with pytest.raises(InvalidInputError):  # a journal in a wait: replay it once woken
        await HandlerKit(remind_later).replay(waiting.journal)


async def test_bad_signals_are_refused_and_keep_nothing() -> None:
    kit = HandlerKit(remind_later, signal_payload_max_bytes=64, signals_per_run_max=2)
    await kit.run()
    for name, payload, key, error in (
        ("x" * 201, {}, "k", InvalidInputError),
        ("paid", {}, "", InvalidInputError),
        ("paid", {"big": "x" * 100}, "k", PayloadTooLargeError),
        ("paid", {"when": object()}, "k", InvalidInputError),
    ):
        with pytest.raises(error):
            kit.signal(name, payload, key=key)
    assert kit.signals.sent == []
    kit.signal("paid", {}, key="1")
    kit.signal("paid", {})  # a fresh key
    with pytest.raises(SignalLimitError) as limit:
        kit.signal("paid", {}, key="3")
    assert limit.value.code == "E-SIGNAL-003" and len(kit.signals.sent) == 2
