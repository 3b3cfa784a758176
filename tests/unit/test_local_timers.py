"""The worker's own timers (awooop.worker.local_timers): which sleep it holds and when it is
due by the worker's clock (``held_of``), and which held sleeps it fires now (``take_due``)."""

from __future__ import annotations

import heapq
import uuid
from datetime import UTC, datetime, timedelta

import msgspec

from awooop.eventlog.state import RunState, RunStatus
from awooop.worker.local_timers import NO_ROOM_RECHECK_S, Held, held_of, take_due
from tests.support.factories import state_in

AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def sleeping(delay_s: float, step: str = "sleep:1", version: int = 3) -> RunState:
    due = (AT + timedelta(seconds=delay_s)).isoformat()
    return msgspec.structs.replace(
        state_in(RunStatus.PENDING),
        version=version,
        updated_at=AT,
        saga_steps={step: {"kind": "sleep", "due_at": due}},
    )


def test_a_sleep_is_due_its_journaled_delay_after_the_write_returned() -> None:
    state = sleeping(2.0, version=7)
    held = held_of(state, "sleep:1", returned=100.0, horizon_s=60.0)
    assert held is not None and held.due == 102.0
    assert (held.run_id, held.project_id, held.version) == (state.run_id, state.project_id, 7)
    assert (held.step, held.due_at) == ("sleep:1", AT + timedelta(seconds=2))


def test_a_sleep_beyond_the_horizon_or_not_journaled_is_the_loops() -> None:
    assert held_of(sleeping(61.0), "sleep:1", returned=0.0, horizon_s=60.0) is None
    assert held_of(sleeping(2.0), "sleep:2", returned=0.0, horizon_s=60.0) is None
    undated = msgspec.structs.replace(sleeping(2.0), saga_steps={"sleep:1": {"kind": "sleep"}})
    assert held_of(undated, "sleep:1", returned=0.0, horizon_s=60.0) is None


def test_a_sleep_already_due_is_due_at_once() -> None:
    held = held_of(sleeping(-1.0), "sleep:1", returned=50.0, horizon_s=60.0)
    assert held is not None and held.due == 50.0


def heap_of(*dues: float) -> list[Held]:
    heap = [Held(d, uuid.uuid4(), "p", 3, "sleep:1", AT) for d in dues]
    heapq.heapify(heap)
    return heap


def test_the_due_sleeps_fire_in_due_order_as_many_as_free_slots() -> None:
    heap = heap_of(3.0, 1.0, 2.0, 9.0)
    due, wait = take_due(heap, now=5.0, limit=10)
    assert [h.due for h in due] == [1.0, 2.0, 3.0]
    assert wait == 4.0  # until the next one is due
    assert [h.due for h in heap] == [9.0]


def test_sleeps_due_beyond_the_free_slots_wait_for_one() -> None:
    heap = heap_of(1.0, 2.0, 3.0)
    due, wait = take_due(heap, now=5.0, limit=2)
    assert [h.due for h in due] == [1.0, 2.0]
    assert wait == NO_ROOM_RECHECK_S and [h.due for h in heap] == [3.0]  # kept, not dropped
    assert take_due(heap, now=5.0, limit=0) == ([], NO_ROOM_RECHECK_S)
    due, _ = take_due(heap, now=6.0, limit=1)
    assert [h.due for h in due] == [3.0] and heap == []


def test_nothing_due_waits_for_the_earliest_and_nothing_held_waits_for_a_change() -> None:
    heap = heap_of(7.0, 6.0)
    assert take_due(heap, now=5.0, limit=3) == ([], 1.0)
    assert take_due([], now=5.0, limit=3) == ([], None)
