"""Under a worker session the heartbeat renews one row, and a run's own lease only when it must
(awooop/worker/heartbeat.py): when half of it is gone, or to show a step that has run for an
interval. Pure rules, no I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from awooop.worker.attempts import Attempt
from awooop.worker.heartbeat import STEP_NAME_CHARS, renewal_due, shown_step

INTERVAL = 5.0
RUN_LEASE = 300.0
NOW = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)


def attempt(confirmed: float = 1000.0) -> Attempt:
    return Attempt(
        run_id=uuid.uuid4(),
        project_id="p",
        worker_id="w",
        number=1,
        lease_deadline=0.0,
        run_confirmed=confirmed,
    )


def in_step(a: Attempt, name: str, age_s: float) -> Attempt:
    a.step, a.step_started_at = name, NOW - timedelta(seconds=age_s)
    return a


def test_a_step_shows_once_it_has_run_for_an_interval() -> None:
    assert shown_step(attempt(), NOW, INTERVAL) is None  # no step
    assert shown_step(in_step(attempt(), "think", INTERVAL - 0.1), NOW, INTERVAL) is None
    a = in_step(attempt(), "think", INTERVAL)
    assert shown_step(a, NOW, INTERVAL) == ("think", a.step_started_at)


def test_a_shown_step_is_storable_and_bounded() -> None:
    name, _ = shown_step(in_step(attempt(), "bad\x00" + "n" * 500, 60), NOW, INTERVAL) or ("", 0)
    assert name.startswith("bad\\u0000") and len(name) == STEP_NAME_CHARS


def test_a_run_is_left_to_the_session_while_its_own_lease_holds_and_nothing_shows() -> None:
    a = attempt(confirmed=1000.0)
    assert not renewal_due(a, 1000.0 + RUN_LEASE / 2 - 0.1, NOW, RUN_LEASE, INTERVAL)
    young = in_step(attempt(confirmed=1000.0), "think", 1.0)  # too young to show
    assert not renewal_due(young, 1001.0, NOW, RUN_LEASE, INTERVAL)


def test_a_run_is_renewed_when_half_of_its_own_lease_is_gone() -> None:
    assert renewal_due(attempt(confirmed=1000.0), 1000.0 + RUN_LEASE / 2, NOW, RUN_LEASE, INTERVAL)


def test_a_run_is_renewed_when_the_step_it_shows_changes_and_only_then() -> None:
    a = in_step(attempt(confirmed=1000.0), "think", 10.0)
    assert renewal_due(a, 1001.0, NOW, RUN_LEASE, INTERVAL)  # a long step, not written yet
    a.step_written = shown_step(a, NOW, INTERVAL)
    assert not renewal_due(a, 1001.0, NOW, RUN_LEASE, INTERVAL)  # written: nothing changed
    a.step, a.step_started_at = None, None
    assert renewal_due(a, 1001.0, NOW, RUN_LEASE, INTERVAL)  # it ended: cleared once
    a.step_written = None
    assert not renewal_due(a, 1001.0, NOW, RUN_LEASE, INTERVAL)
