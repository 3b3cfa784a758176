"""The pure part of the sleeps benchmark (ops/bench/sleeps.py): where a round's sleeping runs
went over their bound. The benchmark itself is a manual run."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def s() -> ModuleType:
    # sleeps imports its siblings by name, as the benchmark's path has it.
    for name in ("scratch", "agents_stats", "cost_measure", "cost", "worker_handlers", "worker"):
        load_script(f"ops/bench/{name}.py", name)
    return load_script("ops/bench/sleeps.py", "sleeps")


def test_the_excess_over_the_bound_splits_into_parts_that_add_up(s: ModuleType) -> None:
    # plain burst 0.40 s; the last sleep started at 0.45 s (due 2.45), fired at 2.453, and the
    # last run completed at 2.457: 0.057 s over the bound of 2.40 s.
    sleep = {"wall_s": 2.457, "phases": {"last_wait_started": 0.45, "last_fired": 2.453}}
    parts = s.excess(0.40, sleep, 2.0)
    assert parts == {"first_half_s": 0.05, "fired_s": 0.003, "resumed_s": 0.004}
    assert round(sum(parts.values()), 3) == round(sleep["wall_s"] - (2.0 + 0.40), 3)


def test_a_first_half_faster_than_the_plain_burst_is_a_negative_part(s: ModuleType) -> None:
    sleep = {"wall_s": 2.41, "phases": {"last_wait_started": 0.39, "last_fired": 2.395}}
    assert s.excess(0.40, sleep, 2.0) == {
        "first_half_s": -0.01,
        "fired_s": 0.005,
        "resumed_s": 0.015,
    }
