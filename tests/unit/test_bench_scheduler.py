"""The pure parts of the scheduler benchmark (ops/bench/scheduler_stats.py): shapes, the
interleaved order, the runs' keys, percentiles, medians with the ratio new/old and the claim
latency's flatness. The benchmark itself is a manual run, not a test."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def m() -> ModuleType:
    return load_script("ops/bench/scheduler_stats.py", "scheduler_stats")


def test_parse_shapes(m: ModuleType) -> None:
    assert m.parse_shapes("0,1,100,10000") == [0, 1, 100, 10_000]
    assert m.parse_shapes(" 5 ") == [5]


@pytest.mark.parametrize("text", ["", "1,1", "-1", "a", "1,,2,2"])
def test_parse_shapes_refuses(m: ModuleType, text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - int() and ours both raise ValueError
        m.parse_shapes(text)


def test_customer_ids_go_round_the_keys(m: ModuleType) -> None:
    assert {m.customer_id(n, 1) for n in range(50)} == {"c0"}
    assert len({m.customer_id(n, 100) for n in range(1000)}) == 100
    assert len({m.customer_id(n, 10_000) for n in range(20_000)}) == 10_000
    assert len({m.customer_id(n, 0) for n in range(300)}) == 300  # no limit: each its own


def test_schedule_interleaves_sides_shape_by_shape_alternating_per_round(m: ModuleType) -> None:
    order = m.schedule(3, [0, 10])
    assert order == [
        (0, 0, "new"),
        (0, 0, "old"),
        (0, 10, "new"),
        (0, 10, "old"),
        (1, 0, "old"),
        (1, 0, "new"),
        (1, 10, "old"),
        (1, 10, "new"),
        (2, 0, "new"),
        (2, 0, "old"),
        (2, 10, "new"),
        (2, 10, "old"),
    ]
    firsts = [side for i, (*_, side) in enumerate(order) if i % 2 == 0]
    assert firsts.count("new") == 4 and firsts.count("old") == 2  # 2 rounds of 3 go new first
    assert m.schedule(2, ["contended"]) == [
        (0, "contended", "new"),
        (0, "contended", "old"),
        (1, "contended", "old"),
        (1, "contended", "new"),
    ]


def test_percentile_and_latency(m: ModuleType) -> None:
    values = [float(v) for v in range(1, 101)]
    assert m.percentile(values, 0.5) == 51.0
    assert m.percentile(values, 0.99) == 100.0
    assert math.isnan(m.percentile([], 0.5))
    assert m.latency([3.0, 1.0, 2.0]) == {"runs": 3, "p50_ms": 2.0, "p99_ms": 3.0, "max_ms": 3.0}
    assert m.latency([])["p50_ms"] is None


def test_ratio(m: ModuleType) -> None:
    assert m.ratio(3.0, 2.0) == 1.5
    assert m.ratio(None, 2.0) is None
    assert m.ratio(1.0, None) is None
    assert m.ratio(1.0, 0.0) is None


def one(side: str, keys: int, value: float) -> dict[str, Any]:
    return {"side": side, "keys": keys, **{f: value for f in ("runs_per_s", "claim_p50_ms")}}


def test_summarize_medians_and_ratio_new_to_old(m: ModuleType) -> None:
    rows = [
        one("new", 1, 10.0),
        one("new", 1, 30.0),
        one("new", 1, 20.0),
        one("old", 1, 10.0),
        one("old", 1, 10.0),
        one("old", 1, 40.0),
        one("new", 5, 8.0),
        one("old", 5, 4.0),
    ]
    out = m.summarize(rows, [1, 5])
    assert out["medians"]["new"]["1"]["runs_per_s"] == 20.0
    assert out["medians"]["old"]["1"]["runs_per_s"] == 10.0
    assert out["medians"]["new"]["1"]["rounds"] == 3
    assert out["medians"]["new"]["1"]["claim_p99_ms"] is None  # not measured
    assert out["ratio_new_to_old"]["1"]["runs_per_s"] == 2.0
    assert out["ratio_new_to_old"]["5"]["claim_p50_ms"] == 2.0
    assert out["ratio_new_to_old"]["5"]["claim_p99_ms"] is None


def test_summarize_other_figures_by_another_field(m: ModuleType) -> None:
    rows = [
        {"side": "new", "measure": "alone", "x": 3.0, "runs_per_s": 1.0},
        {"side": "old", "measure": "alone", "x": 2.0},
        {"side": "new", "measure": "contended", "x": 9.0},
    ]
    out = m.summarize(rows, ["alone", "contended"], figures=("x",), by="measure")
    assert out["medians"]["new"]["alone"] == {"x": 3.0, "rounds": 1}  # only the figures asked
    assert out["medians"]["old"]["contended"] == {"x": None, "rounds": 0}
    assert out["ratio_new_to_old"]["alone"] == {"x": 1.5}


def test_flatness_compares_fewest_and_most_keys(m: ModuleType) -> None:
    medians = {
        "new": {
            "0": {"claim_p50_ms": 1.0, "claim_p99_ms": 1.0},
            "1": {"claim_p50_ms": 4.0, "claim_p99_ms": 10.0},
            "100": {"claim_p50_ms": 9.0, "claim_p99_ms": 9.0},
            "10000": {"claim_p50_ms": 5.0, "claim_p99_ms": 20.0},
        }
    }
    out = m.flatness(medians, [0, 1, 100, 10_000])
    assert (out["fewest_keys"], out["most_keys"]) == (1, 10_000)
    assert out["new"]["keys_1"] == {"p50_ms": 4.0, "p99_ms": 10.0}
    assert out["new"]["keys_10000"] == {"p50_ms": 5.0, "p99_ms": 20.0}
    assert (out["new"]["ratio_p50"], out["new"]["ratio_p99"]) == (1.25, 2.0)
    assert m.flatness(medians, [0, 1]) == {}
