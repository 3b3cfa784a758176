"""The suite's connection budget: first come first served, capped at the budget, and a dead
process's reservation or place in line never blocks the others."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from tests.support.budget import Budget, Shared, admit, release, slack, write


def everyone_alive(pid: int) -> bool:
    return True


def test_reservations_are_granted_while_they_fit_and_the_rest_wait() -> None:
    state = Shared(budget=30)
    assert admit(state, 1, 10, everyone_alive) == 10
    assert admit(state, 2, 15, everyone_alive) == 15
    assert admit(state, 3, 10, everyone_alive) == 0
    assert (state.held, state.waiting) == ({1: 10, 2: 15}, [3])
    release(state, 1)
    assert admit(state, 3, 10, everyone_alive) == 10
    assert (state.held, state.waiting) == ({2: 15, 3: 10}, [])


def test_a_large_reservation_first_in_line_is_not_overtaken_by_small_ones() -> None:
    state = Shared(budget=30)
    assert admit(state, 1, 10, everyone_alive) == 10
    assert admit(state, 2, 25, everyone_alive) == 0
    assert admit(state, 3, 5, everyone_alive) == 0  # would fit, but 2 asked first
    release(state, 1)
    assert admit(state, 3, 5, everyone_alive) == 0
    assert admit(state, 2, 25, everyone_alive) == 25
    assert admit(state, 3, 5, everyone_alive) == 5
    assert sum(state.held.values()) == 30


def test_a_reservation_larger_than_the_budget_gets_the_whole_budget_when_it_is_free() -> None:
    state = Shared(budget=20)
    assert admit(state, 1, 5, everyone_alive) == 5
    assert admit(state, 2, 56, everyone_alive) == 0
    release(state, 1)
    assert admit(state, 2, 56, everyone_alive) == 20


def test_the_dead_lose_their_reservations_and_their_places() -> None:
    state = Shared(budget=20)
    assert admit(state, 1, 20, everyone_alive) == 20
    assert admit(state, 2, 10, everyone_alive) == 0
    assert admit(state, 3, 10, everyone_alive) == 0
    dead = {1, 2}
    assert admit(state, 3, 10, lambda pid: pid not in dead) == 10
    assert (state.held, state.waiting) == ({3: 10}, [])


def test_one_process_holds_one_reservation_at_a_time() -> None:
    state = Shared(budget=20)
    admit(state, 1, 5, everyone_alive)
    with pytest.raises(RuntimeError, match="already holds 5"):
        admit(state, 1, 5, everyone_alive)


def test_the_slack_is_a_tenth_of_what_is_free_and_at_least_five() -> None:
    assert [slack(free) for free in (3, 50, 97, 300)] == [5, 5, 9, 30]


async def test_the_shared_file_carries_the_budget_between_processes(tmp_path: Path) -> None:
    path, parent = tmp_path / "budget.json", os.getppid()
    write(path, Shared(budget=12, held={parent: 12}))
    share = Budget("postgresql://unused", path)
    assert await share.total() == 12  # measured once, by whoever came first
    with pytest.raises(TimeoutError, match=f"1 of the suite's 12 .* held: {{{parent}: 12}}"):
        await share.reserve(1, within_s=0)
    assert Shared(budget=12, held={parent: 12}) == read(path)  # its place in line given up
    write(path, Shared(budget=12, held={99999999: 12}))  # a pid no process has
    assert await share.reserve(20) == 12
    share.cancel()
    assert read(path) == Shared(budget=12)


def read(path: Path) -> Shared:
    return msgspec.json.decode(path.read_bytes(), type=Shared)
