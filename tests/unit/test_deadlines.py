"""The local lease deadlines: attempts whose deadlines fall in one slot share one loop timer,
which stops each of them no later than its deadline (and at most one slot before it)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from awooop.worker.attempts import SLOT_S, Attempt, Deadlines, StreamEntry


def attempt() -> Attempt:
    return Attempt(run_id=uuid.uuid4(), project_id="p", worker_id="w", number=1, lease_deadline=0.0)


def test_an_attempt_and_its_stream_entry_keep_no_instance_dict() -> None:
    assert not hasattr(attempt(), "__dict__")
    assert not hasattr(StreamEntry("s", "1-0"), "__dict__")


async def test_attempts_of_one_deadline_share_one_timer_that_stops_them_in_time() -> None:
    stopped: list[tuple[Attempt, float]] = []
    deadlines = Deadlines(lambda a: stopped.append((a, time.monotonic())))
    deadline = time.monotonic() + 0.2
    held = [attempt() for _ in range(1000)]
    for a in held:
        deadlines.hold_until(a, deadline)
    assert len(deadlines) == 1
    await asyncio.sleep(0.35)
    assert [a for a, _at in stopped] == held
    assert all(deadline - SLOT_S - 0.005 <= at <= deadline + 0.05 for _a, at in stopped)
    assert len(deadlines) == 0 and all(a.deadline_slot is None for a in held)


async def test_a_later_deadline_moves_the_timer_an_earlier_one_is_ignored() -> None:
    stopped: list[Attempt] = []
    deadlines = Deadlines(stopped.append)
    a = attempt()
    now = time.monotonic()
    deadlines.hold_until(a, now + 0.1)
    deadlines.hold_until(a, now + 0.3)
    deadlines.hold_until(a, now + 0.05)
    assert a.lease_deadline == now + 0.3 and len(deadlines) == 1
    await asyncio.sleep(0.18)
    assert stopped == []
    await asyncio.sleep(0.2)
    assert stopped == [a]


async def test_a_disarmed_attempt_is_not_stopped_and_its_empty_slot_has_no_timer() -> None:
    stopped: list[Attempt] = []
    deadlines = Deadlines(stopped.append)
    first, second = attempt(), attempt()
    deadline = time.monotonic() + 0.1
    deadlines.hold_until(first, deadline)
    deadlines.hold_until(second, deadline)
    deadlines.disarm(first)
    assert len(deadlines) == 1
    deadlines.disarm(second)
    assert len(deadlines) == 0
    await asyncio.sleep(0.2)
    assert stopped == []


async def test_a_deadline_already_past_stops_the_attempt_at_once() -> None:
    stopped: list[Attempt] = []
    deadlines = Deadlines(stopped.append)
    a = attempt()
    deadlines.hold_until(a, time.monotonic() - 1.0)
    await asyncio.sleep(0.01)
    assert stopped == [a]


async def test_one_stop_that_fails_does_not_keep_the_others_of_its_slot_running() -> None:
    stopped: list[Attempt] = []
    failures: list[Any] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: failures.append(ctx))
    first, second = attempt(), attempt()

    def stop(a: Attempt) -> None:
        if a is first:
            raise RuntimeError("broken")
        stopped.append(a)

    deadlines = Deadlines(stop)
    deadline = time.monotonic() + 0.05
    deadlines.hold_until(first, deadline)
    deadlines.hold_until(second, deadline)
    await asyncio.sleep(0.15)
    assert stopped == [second]
    assert [type(f["exception"]) for f in failures] == [RuntimeError]
