"""Under a worker session the heartbeat renews one row, and a run's own lease only when it must
(awooop/worker/heartbeat.py): when half of it is gone, or to show a step that has run for an
interval. Pure rules, no I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awooop.core.config import load_settings
from awooop.core.errors import ConfigError
from awooop.worker.attempts import Attempt
from awooop.worker.executor import Executor
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


def executor(**settings: Any) -> Executor:
    return Executor(
        db=None,  # type: ignore[arg-type]  # deadlines only: no statement is sent
        settings=load_settings(environ={}, **settings),
        handler=None,  # type: ignore[arg-type]
        worker_id="w",
    )


async def test_a_local_deadline_is_the_earlier_of_the_session_and_the_runs_own_lease() -> None:
    """The database's lease is the earlier of the run's own and the session's, each computed
    after its statement was sent: the local deadline takes the same two from the sends, less
    the margin, so it always comes first."""
    ex = executor()  # lease 30 s, margin 3 s, a run's own lease 300 s
    ex.hold_session(1000.0)
    a = attempt()
    ex.attempts[a.run_id] = a
    ex.hold(a, 1010.0)  # claimed after the session's last renewal
    assert a.lease_deadline == 1000.0 + 30.0 - 3.0  # the session's bound
    ex.hold_session(1400.0)  # the session renewed long after the run's own lease was
    assert a.lease_deadline == 1010.0 + 300.0 - 3.0  # the run's own lease bounds it now
    ex.deadlines.disarm(a)


async def test_without_sessions_a_local_deadline_is_the_last_confirmed_renewal_plus_the_lease() -> (
    None
):
    ex = executor(session_leases=False)
    a = attempt()
    ex.hold(a, 1000.0)
    assert a.lease_deadline == 1000.0 + 30.0 - 3.0
    ex.deadlines.disarm(a)


def test_a_runs_own_lease_shorter_than_twice_the_lease_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="AWOOOP_RUN_LEASE_TTL_S"):
        load_settings(environ={"AWOOOP_RUN_LEASE_TTL_S": "50"})  # the lease is 30 s
    assert load_settings(environ={"AWOOOP_RUN_LEASE_TTL_S": "60"}).run_lease_s == 60.0
    assert load_settings(environ={}).run_lease_s == 300.0  # 0: ten times the lease
