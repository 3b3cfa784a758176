"""The pure decisions around dead letters: what a re-drive does for the run's state, how ids
read, what a dead-lettering failure records, what the stats loop publishes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.errors import InvalidInputError
from awooop.core.events import RunCreated, RunFailed
from awooop.eventlog.deadletters import WORK, record_of_failure
from awooop.eventlog.state import RunStatus, apply
from awooop.loops.stats import dead_letters_sample
from awooop.runs.deadletters import Outcome, check_shard, parse_id, plan_for

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_run_state_decides() -> None:
    assert plan_for(RunStatus.FAILED) is Outcome.RETRIED
    assert plan_for(RunStatus.PENDING) is Outcome.REQUEUED
    assert plan_for(RunStatus.RESUMED) is Outcome.REQUEUED
    for status in (
        RunStatus.RUNNING,
        RunStatus.WAITING_TOOL,
        RunStatus.WAITING_APPROVAL,
        RunStatus.COMPLETED,
        RunStatus.CANCELLED,
    ):
        assert plan_for(status) is Outcome.DISCARDED


def test_ids() -> None:
    dead_id = uuid.uuid4()
    assert parse_id(str(dead_id)) == dead_id
    assert parse_id(f" {dead_id} ") == dead_id
    for bad in ("", "2:1700000000000-0", "1700000000000-0", "x", str(dead_id)[:-1]):
        with pytest.raises(InvalidInputError):
            parse_id(bad)
    assert check_shard(3, 4) == 3
    with pytest.raises(InvalidInputError):
        check_shard(4, 4)


def test_a_dead_lettering_failure_is_recorded_at_its_own_version() -> None:
    """The occurrence is the RunFailed's version in the run's stream: the run's version + 1."""
    run_id = uuid.uuid4()
    state = apply(
        None,
        RunCreated(
            at=AT,
            run_id=run_id,
            project_id="p1",
            channel_type="webhook",
            provider_event_id="e1",
            input={},
            max_attempts=3,
        ),
    )
    failed = RunFailed(at=AT, reason="why", code="E-RUN-004", dead_letter=True)
    dead = record_of_failure(state, failed)
    assert (dead.project_id, dead.run_id, dead.run_version) == ("p1", run_id, state.version + 1)
    assert (dead.source, dead.code, dead.reason) == (WORK, "E-RUN-004", "why")


def test_the_gauge_always_has_the_platform_series() -> None:
    """StatsNotSampled watches absent(awooop_dead_letters_open): no dead letter is still 0."""
    assert dead_letters_sample({}) == {(PLATFORM_PROJECT,): 0.0}
    assert dead_letters_sample({"p1": 2}) == {(PLATFORM_PROJECT,): 0.0, ("p1",): 2.0}
