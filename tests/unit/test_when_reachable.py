"""A starting process's steps wait while the database is away or full (E-DB-001), give up
after their wait with that error, and end quietly when the process is told to stop."""

from __future__ import annotations

import asyncio

import pytest

from awooop.core.errors import DatabaseUnavailableError
from awooop.services import when_reachable


class Flaky:
    """A step that finds the server full ``failures`` times, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise DatabaseUnavailableError("cannot connect: sorry, too many clients already")
        return "ready"


async def test_a_step_is_tried_again_until_the_database_has_room() -> None:
    step = Flaky(failures=2)
    assert await when_reachable(step, wait_s=10) == "ready"
    assert step.calls == 3


async def test_after_the_wait_the_error_is_raised() -> None:
    step = Flaky(failures=100)
    with pytest.raises(DatabaseUnavailableError, match="too many clients"):
        await when_reachable(step, wait_s=0.6)
    assert step.calls == 2  # at 0 s and at 0.5 s; the next try would be past the wait


async def test_a_stop_while_waiting_ends_the_wait_with_none() -> None:
    step = Flaky(failures=100)
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, stop.set)
    assert await when_reachable(step, stop=stop, wait_s=60) is None
    assert step.calls == 1


async def test_other_errors_are_not_waited_on() -> None:
    async def refused() -> None:
        raise PermissionError("not a database outage")

    with pytest.raises(PermissionError):
        await when_reachable(refused, wait_s=60)
