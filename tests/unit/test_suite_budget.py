"""The suite's connection budget: reservations capped at the budget, small ones passing a wide
one only until it has waited its patience, and a dead process's reservation or place in line
never blocking the others, nor a new process that got a dead one's id."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from tests.support.budget import (
    PATIENCE_S,
    Budget,
    Shared,
    admit,
    incarnation,
    me,
    process_alive,
    release,
    slack,
    write,
)


def everyone_alive(holder: str) -> bool:
    return True


def ask(state: Shared, holder: str, wanted: int, at: float = 0.0) -> int:
    return admit(state, holder, wanted, everyone_alive, at)


def test_reservations_are_granted_while_they_fit_and_the_rest_wait() -> None:
    state = Shared(budget=30)
    assert ask(state, "1", 10) == 10
    assert ask(state, "2", 15) == 15
    assert ask(state, "3", 10) == 0
    assert (state.held, state.waiting) == ({"1": 10, "2": 15}, [("3", 0.0)])
    release(state, "1")
    assert ask(state, "3", 10, at=1.0) == 10
    assert (state.held, state.waiting) == ({"2": 15, "3": 10}, [])


def test_small_reservations_pass_a_wide_one_until_it_has_waited_its_patience() -> None:
    state = Shared(budget=30)
    assert ask(state, "1", 10) == 10
    assert ask(state, "2", 25, at=0.0) == 0
    assert ask(state, "3", 5, at=PATIENCE_S - 1) == 5  # fits, and 2 has not waited long
    release(state, "3")
    assert ask(state, "3", 5, at=PATIENCE_S) == 0  # now nobody passes 2
    release(state, "1")
    assert ask(state, "3", 5, at=PATIENCE_S + 1) == 0
    assert ask(state, "2", 25, at=PATIENCE_S + 1) == 25
    assert ask(state, "3", 5, at=PATIENCE_S + 2) == 5
    assert (sum(state.held.values()), state.waiting) == (30, [])


def test_a_reservation_larger_than_the_budget_gets_the_whole_budget_when_it_is_free() -> None:
    state = Shared(budget=20)
    assert ask(state, "1", 5) == 5
    assert ask(state, "2", 56) == 0
    release(state, "1")
    assert ask(state, "2", 56) == 20


def test_the_dead_lose_their_reservations_and_their_places() -> None:
    state = Shared(budget=20)
    assert ask(state, "1", 20) == 20
    assert ask(state, "2", 10) == 0
    assert ask(state, "3", 10, at=PATIENCE_S) == 0
    dead = {"1", "2"}
    assert admit(state, "3", 10, lambda holder: holder not in dead, PATIENCE_S) == 10
    assert (state.held, state.waiting) == ({"3": 10}, [])


def test_one_process_holds_one_reservation_at_a_time() -> None:
    state = Shared(budget=20)
    ask(state, "1", 5)
    with pytest.raises(RuntimeError, match="already holds 5"):
        ask(state, "1", 5)


def test_the_slack_is_a_tenth_of_what_is_free_and_at_least_five() -> None:
    assert [slack(free) for free in (3, 50, 97, 300)] == [5, 5, 9, 30]


def test_a_dead_process_s_reservation_is_dropped_when_a_new_one_gets_its_id() -> None:
    own = me()
    pid, started = own.split(":")
    earlier = f"{pid}:{int(started) - 1}"  # this id, held by a process that ended before
    assert process_alive(own) and not process_alive(earlier)
    state = Shared(budget=20, held={earlier: 8}, waiting=[(earlier, 0.0)])
    assert admit(state, own, 8, process_alive, 1.0) == 8
    assert (state.held, state.waiting) == ({own: 8}, [])


def test_an_incarnation_is_the_process_id_and_its_start() -> None:
    assert me() == incarnation(os.getpid())
    assert me().startswith(f"{os.getpid()}:")
    assert incarnation(os.getppid()) != me()
    assert incarnation(99999999) is None  # an id no process has


async def test_the_shared_file_carries_the_budget_between_processes(tmp_path: Path) -> None:
    path, parent = tmp_path / "budget.json", incarnation(os.getppid())
    assert parent is not None
    write(path, Shared(budget=12, held={parent: 12}))
    share = Budget("postgresql://unused", path)
    assert await share.total() == 12  # measured once, by whoever came first
    with pytest.raises(TimeoutError, match=f"1 of the suite's 12 .* held: {{'{parent}': 12}}"):
        await share.reserve(1, within_s=0)
    assert Shared(budget=12, held={parent: 12}) == read(path)  # its place in line given up
    write(path, Shared(budget=12, held={"99999999:1": 12}))  # a pid no process has
    assert await share.reserve(20) == 12
    share.cancel()
    assert read(path) == Shared(budget=12)


def read(path: Path) -> Shared:
    return msgspec.json.decode(path.read_bytes(), type=Shared)
