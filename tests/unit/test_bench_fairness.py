"""The pure parts of the fairness benchmark (ops/bench/fairness_stats.py): two projects in one
shard, the start latency's figures and the targets. The benchmark itself is a manual run, not
a test."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from awooop.streams.keys import shard_of
from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def m() -> ModuleType:
    return load_script("ops/bench/fairness_stats.py", "fairness_stats")


@pytest.mark.parametrize("shards", [1, 2, 4, 7, 16])
def test_same_shard_pair_shares_a_shard(m: ModuleType, shards: int) -> None:
    a, b = m.same_shard_pair(shards)
    assert a == "bench-a"
    assert b != a and b.startswith("bench-b")
    assert shard_of(a, shards) == shard_of(b, shards)


def test_same_shard_pair_takes_the_first_candidate_that_fits(m: ModuleType) -> None:
    assert m.same_shard_pair(1) == ("bench-a", "bench-b")  # one shard: the first name
    a, b = m.same_shard_pair(4, "x", "y")
    n = int(b[1:] or 0)
    assert all(shard_of(f"y{k or ''}", 4) != shard_of(a, 4) for k in range(n))


def test_same_shard_pair_refuses_no_shards(m: ModuleType) -> None:
    with pytest.raises(ValueError, match="shard count"):
        m.same_shard_pair(0)


def test_start_figures_prefix_the_latency(m: ModuleType) -> None:
    got = m.start_figures("b", {"runs": 3, "p50_ms": 2.0, "p99_ms": 3.0, "max_ms": 3.0})
    assert got == {
        "b_start_runs": 3,
        "b_start_p50_ms": 2.0,
        "b_start_p99_ms": 3.0,
        "b_start_max_ms": 3.0,
    }
    assert set(got) - {"b_start_runs"} <= set(m.FIGURES)


def summary(b_p99_new: float | None, rps_ratio: float | None) -> dict[str, Any]:
    return {
        "medians": {
            "new": {"contended": {"b_start_p99_ms": b_p99_new}},
            "old": {"contended": {"b_start_p99_ms": 30_000.0}},
        },
        "ratio_new_to_old": {"alone": {"runs_per_s": rps_ratio, "scheduler_cpu_ms_per_run": 1.05}},
    }


def test_targets_met(m: ModuleType) -> None:
    got = m.targets(summary(1999.0, 0.9))
    assert got["b_start_p99_met"] is True and got["alone_runs_per_s_met"] is True
    assert (got["b_start_p99_ms_new"], got["b_start_p99_ms_old"]) == (1999.0, 30_000.0)
    assert got["alone_cpu_ms_per_run_ratio"] == 1.05


@pytest.mark.parametrize(
    ("b_p99", "ratio", "b_met", "ratio_met"),
    [(2000.0, 0.89, False, False), (None, None, False, False), (10.0, 1.3, True, True)],
)
def test_targets_missed_or_unmeasured(
    m: ModuleType, b_p99: float | None, ratio: float | None, b_met: bool, ratio_met: bool
) -> None:
    got = m.targets(summary(b_p99, ratio))
    assert (got["b_start_p99_met"], got["alone_runs_per_s_met"]) == (b_met, ratio_met)
