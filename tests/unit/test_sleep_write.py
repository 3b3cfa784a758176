"""leases.Sleep: the fenced write of a sleep's WaitStarted, its event as apply() takes it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

from awooop.core.events import WaitStarted
from awooop.runs import leases

AT = datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
RUN = uuid.uuid4()


def test_a_delay_is_due_that_long_after_the_writes_clock() -> None:
    sleep = leases.Sleep(RUN, "w1", 3, {"k": 1}, step="sleep:2", delay=timedelta(seconds=2))
    event = sleep.make_event(None, AT)  # type: ignore[arg-type]
    assert event == WaitStarted(
        at=AT,
        worker_id="w1",
        attempt=3,
        step="sleep:2",
        kind="sleep",
        due_at=AT + timedelta(seconds=2),
    )
    assert sleep.delay_us == 2_000_000
    assert isinstance(sleep, leases.FencedWrite) and sleep.metadata == {"k": 1}


def test_until_wins_and_is_journaled_in_utc() -> None:
    east = timezone(timedelta(hours=2))
    until = datetime(2031, 1, 2, 3, 4, 5, tzinfo=east)
    sleep = leases.Sleep(RUN, "w1", 1, step="nap", delay=timedelta(hours=1), until=until)
    event = sleep.event(None, AT)  # type: ignore[arg-type]
    assert event.due_at == until and event.due_at is not None
    assert event.due_at.utcoffset() == timedelta(0)
    assert sleep.delay_us is None


def test_two_equal_sleeps_compare_equal() -> None:
    made = [leases.Sleep(RUN, "w1", 1, step="s", delay=timedelta(seconds=1)) for _ in range(2)]
    assert made[0] == made[1] and hash(made[0]) == hash(made[1])
    assert made[0] != leases.Sleep(RUN, "w1", 2, step="s", delay=timedelta(seconds=1))
