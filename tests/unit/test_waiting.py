"""``eventually``: polls sync and async conditions, and says what it waited for on timeout."""

from __future__ import annotations

import pytest

from tests.support.waiting import eventually


async def test_returns_the_first_truthy_value_of_a_sync_condition() -> None:
    calls: list[int] = []

    def condition() -> list[int]:
        calls.append(1)
        return calls if len(calls) >= 3 else []

    assert await eventually(condition, interval_s=0.001, what="three calls") == [1, 1, 1]


async def test_awaits_an_async_condition_and_compares_with_equals() -> None:
    values = iter(["PENDING", "RUNNING", "COMPLETED"])

    async def status() -> str:
        return next(values)

    got = await eventually(status, equals="COMPLETED", interval_s=0.001, what="the status")
    assert got == "COMPLETED"


async def test_a_timeout_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(
        AssertionError, match=r"the run COMPLETED: not within 0.05 s \(last seen: 'FAILED'\)"
    ):
        await eventually(
            lambda: "FAILED",
            equals="COMPLETED",
            timeout_s=0.05,
            interval_s=0.01,
            what="the run COMPLETED",
        )


async def test_ignored_exceptions_count_as_not_yet_and_others_propagate() -> None:
    attempts: list[int] = []

    def flaky() -> bool:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("starting")
        return True

    def down() -> bool:
        raise ConnectionError("down")

    def bug() -> bool:
        raise ValueError("bad")

    assert await eventually(flaky, ignoring=(ConnectionError,), interval_s=0.001, what="up")
    with pytest.raises(AssertionError, match=r"last seen: ConnectionError\('down'\)"):
        await eventually(
            down, ignoring=(ConnectionError,), timeout_s=0.02, interval_s=0.01, what="never"
        )
    with pytest.raises(ValueError, match="bad"):
        await eventually(bug, ignoring=(ConnectionError,), what="a bug")
