"""The pure parts of the growth benchmark (ops/bench/growth.py): sizes, ratios, the number of
events of generated runs, and the generated runs themselves agreeing with ``apply``. The
benchmark itself is a manual run, not a test."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def m() -> ModuleType:
    return load_script("ops/bench/growth.py", "growth_bench")


@pytest.mark.parametrize(
    ("text", "events"),
    [
        ("0", 0),
        ("250000", 250_000),
        ("500k", 500_000),
        ("10M", 10_000_000),
        ("1.5M", 1_500_000),
        ("50m", 50_000_000),
        ("1G", 1_000_000_000),
        ("1_000", 1_000),
    ],
)
def test_parse_size(m: ModuleType, text: str, events: int) -> None:
    assert m.parse_size(text) == events


@pytest.mark.parametrize("text", ["", "M", "-1", "1.5", "0.0001k", "ten"])
def test_parse_size_refuses(m: ModuleType, text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - float() and ours both raise ValueError
        m.parse_size(text)


def test_sizes_must_grow(m: ModuleType) -> None:
    assert m.parse_sizes("0,10M,50M") == [0, 10_000_000, 50_000_000]
    with pytest.raises(ValueError, match="increase"):
        m.parse_sizes("0,50M,10M")
    with pytest.raises(ValueError, match="increase"):
        m.parse_sizes("1M,1M")


@pytest.mark.parametrize("size", [0, 999, 250_000, 1_000_000, 1_500_000, 10_000_000, 50_000_000])
def test_size_label_round_trips(m: ModuleType, size: int) -> None:
    assert m.parse_size(m.size_label(size)) == size


def test_ratios_divide_by_the_base_and_skip_what_is_missing(m: ModuleType) -> None:
    medians = {"0": 2.0, "10M": 2.2, "50M": 2.5, "1G": None}
    assert m.ratios(medians, "0") == {"10M": 1.1, "50M": 1.25, "1G": None}
    assert m.ratios({"0": 0.0, "10M": 1.0}, "0") == {"10M": None}


def test_runs_hold_four_events_on_average(m: ModuleType) -> None:
    assert m.events_of_runs(0, 3) == 3 + 4 + 5
    assert m.events_of_runs(0, m.runs_for(1_200_000)) == 1_200_000
    assert m.runs_for(10_000_000) == 2_500_000


def test_generated_runs_fold_to_their_run_state_rows(m: ModuleType) -> None:
    window = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    events, heads, states, dedupe, count = m.chunk_text(10, 30, 1000, 4, window, 7)
    assert count == len(events) == m.events_of_runs(10, 30)
    assert len(heads) == len(states) == len(dedupe) == 30  # a string of two rows per run
    rng, clock = random.Random(1), m.Clock()
    at = int(window[0].timestamp() * 1_000_000)
    for index in range(3):  # every shape: 0, 1 and 2 steps
        lines, head, state, key = m.fast_run(rng, clock, index, 4, at)
        m.check_run(lines, state)  # raises if apply() disagrees
        assert head.split("\t")[2] == str(len(lines)) == state.split("\t")[6]
        rows = [line.split("\t") for line in key.rstrip("\n").split("\n")]
        assert len(rows) == 2  # the run's dedupe window and the next
        first, second = (datetime.fromisoformat(r[3]) for r in rows)
        assert second - first == timedelta(days=7) and first <= datetime.fromtimestamp(
            at / 1e6, UTC
        )
        for row in rows:
            created, expires = (datetime.fromisoformat(v) for v in row[5:])
            assert expires - created == timedelta(days=7)


def test_a_wrong_run_state_row_is_caught(m: ModuleType) -> None:
    lines, _head, state, _key = m.fast_run(random.Random(1), m.Clock(), 1, 4, 1_700_000_000_000_000)
    with pytest.raises(AssertionError, match="differs"):
        m.check_run(lines, state.replace("COMPLETED", "FAILED"))


def test_clock_formats_microseconds_in_utc(m: ModuleType) -> None:
    clock = m.Clock()
    moment = datetime(2026, 12, 1, 18, 59, 7, 5, tzinfo=UTC)
    us = int(moment.timestamp()) * 1_000_000 + 5
    assert clock.text(us, "Z") == "2026-12-01T18:59:07.000005Z"
    assert datetime.fromisoformat(clock.text(us, "+00:00")) == moment
