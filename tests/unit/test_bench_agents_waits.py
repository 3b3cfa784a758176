"""The pure parts of the agents benchmark's waiting agents (ops/bench/agents_waits.py): the
agents, the ideal wall time with a sleep, and the waits' figures from the journal. The
benchmark itself is a manual run."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def w() -> ModuleType:
    # agents_waits imports its sibling agents_stats by name, as the benchmark's path has it.
    load_script("ops/bench/agents_stats.py", "agents_stats")
    return load_script("ops/bench/agents_waits.py", "agents_waits")


def test_the_ideal_wall_time_accounts_for_the_sleep(w: ModuleType) -> None:
    # 200 runs, 100 slots, 2 steps of 0.5 s: 2 s of model time per slot; with a 2 s sleep after
    # the first step, the last first step ends at 1 s, then its sleep and its last step.
    assert w.ideal_s(200, 100, 2, 0.5, 0.0) == 2.0
    assert w.ideal_s(200, 100, 2, 0.5, 2.0) == 3.5
    # Much work and a short sleep: the slots' work bounds it (sleeping runs hold none).
    assert w.ideal_s(2000, 100, 3, 1.0, 2.0) == 60.0
    assert w.ideal_s(10, 100, 1, 1.0, 5.0) == 5.1  # one step, its sleep, nothing after


def test_agents_and_their_refusals(w: ModuleType) -> None:
    llm = w.agent_of("llm", "step", 2.0)
    assert (llm.handler, dict(llm.fields), llm.attempts, llm.wait_s) == ("agent_steps", {}, 1, 0.0)
    sleep = w.agent_of("sleep", "llm_step", 1.5)
    assert (sleep.handler, sleep.wait_s, sleep.timers, sleep.reviewer) == (
        "agent_sleeps",
        1.5,
        True,
        False,
    )
    assert dict(sleep.fields) == {"api": "llm_step", "sleep_s": 1.5}
    assert sleep.warmup_fields["sleep_s"] == w.WARMUP_SLEEP_S
    approval = w.agent_of("approval", "llm_step", 2.0)
    assert (approval.wait_s, approval.attempts, approval.reviewer) == (0.0, 2, True)
    for bad in (("nap", "llm_step", 2.0), ("sleep", "llm_step", 0.0), ("llm", "stream", 2.0)):
        with pytest.raises(ValueError):  # noqa: PT011 - each refusal is a ValueError
            w.agent_of(*bad)


def sleeper(w: ModuleType, run: str, times: list[float]) -> list[object]:
    """A run's events of a sleep: claimed, asleep, woken, claimed again, completed."""
    kinds = ("RunClaimed", "WaitStarted", "TimerFired", "RunClaimed", "RunCompleted")
    return [w.Event(run, kind, at) for kind, at in zip(kinds, times, strict=True)]


def test_wait_figures_of_sleeps(w: ModuleType) -> None:
    # Two slots, four runs: a and b run first and sleep from 1 to 3; c and d take their slots
    # (claimed at 1.1) and sleep from 2 to 4.
    events = [
        *sleeper(w, "a", [0.0, 1.0, 3.0, 3.02, 3.5]),
        *sleeper(w, "b", [0.0, 1.0, 3.0, 3.05, 3.5]),
        *sleeper(w, "c", [1.1, 2.0, 4.0, 4.01, 4.5]),
        *sleeper(w, "d", [1.1, 2.0, 4.0, 4.01, 4.5]),
    ]
    summary, section = w.wait_figures("sleep", events, 2)
    assert summary["wake_to_resume_p50_ms"] == 20.0  # of 20, 50, 10 and 10 ms (nearest rank)
    assert summary["wake_to_resume_p99_ms"] == 50.0
    assert summary["asleep_max"] == 4
    assert summary["fired_twice"] == summary["resumed_twice"] == 0
    held = section["occupancy"]
    # From 1.1 to 2.0 both slots ran c and d while a and b slept: the sleepers held none.
    assert summary["slots_held_while_asleep"] == held["slots_held_while_waiting"] == 0
    assert (held["waiting_max"], held["in_attempt_max"], held["occupied_max"]) == (4, 2, 4)
    assert [round(v) for v in w.to_next_claim(w.by_run(events), "TimerFired")] == [20, 50, 10, 10]
    assert section["waited"]["p50_ms"] == 2000.0


def test_a_run_that_holds_its_slot_while_it_sleeps_shows(w: ModuleType) -> None:
    # One slot; a sleeps from 1 to 3 and b, submitted with it, is claimed only at 3.1: the
    # slot stayed free while a slept, as if a held it.
    events = [*sleeper(w, "a", [0.0, 1.0, 3.0, 3.0, 3.1]), *sleeper(w, "b", [3.1, 4, 5, 5, 6])]
    held = w.wait_figures("sleep", events, 1)[1]["occupancy"]
    assert (held["slots_held_while_waiting"], held["occupied_max"]) == (1, 1)
    assert w.occupancy([], [(0.0, 1.0)], 1)["slots_held_while_waiting"] is None  # none slept


def test_repeats_of_approvals(w: ModuleType) -> None:
    def run(name: str, kinds: list[str]) -> list[object]:
        return [w.Event(name, kind, float(i)) for i, kind in enumerate(kinds)]

    once = ["RunClaimed", "ApprovalRequested", "ApprovalGranted", "RunClaimed", "RunCompleted"]
    twice = [*once[:4], "ApprovalGranted", "RunClaimed", "RunCompleted"]
    waiting = once[:2]
    events = [*run("a", once), *run("b", twice), *run("c", waiting)]
    assert w.repeats(w.by_run(events), "ApprovalRequested", "ApprovalGranted") == {
        "waited_more_than_once": 0,
        "ended_more_than_once": 1,
        "resumed_more_than_once": 1,
        "not_ended": 1,
    }
    summary, section = w.wait_figures("approval", events, 10)
    assert (summary["approved_twice"], summary["resumed_twice"]) == (1, 1)
    assert section["approve_to_resume"]["count"] == 3  # b: after each decision
    assert w.began("approval", events) == {"a": [1.0], "b": [1.0], "c": [1.0]}
    assert w.began("llm", events) is None
