"""The pure decisions of dead-letter re-drive: what the run's state means, how ids read."""

from __future__ import annotations

import pytest

from awooop.core.errors import InvalidInputError
from awooop.log.state import RunStatus
from awooop.runs.deadletters import Outcome, check_shard, parse_id, plan_for


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
    assert parse_id("2:1700000000000-0", 4) == (2, "1700000000000-0")
    assert parse_id(" 1700000000000-3 ", 4) == (None, "1700000000000-3")
    for bad in ("", "2:", "4:1-0", "x:1-0", "1700000000000", "1-0-0", "-1:1-0"):
        with pytest.raises(InvalidInputError):
            parse_id(bad, 4)
    assert check_shard(3, 4) == 3
    with pytest.raises(InvalidInputError):
        check_shard(4, 4)
