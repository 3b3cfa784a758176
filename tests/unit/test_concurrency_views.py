"""The pure parts around concurrency keys: the depth cap's decision, the gauge's label sets and
doctor's stuck keys."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from awooop.commands.doctor_keys import stuck
from awooop.ingest.depth import over_cap
from awooop.loops.stats import keys_sample
from awooop.runs.concurrency import KeyUsage

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def usage(key: str, executing: int, waiting: int, age_s: float | None) -> KeyUsage:
    oldest = None if age_s is None else NOW - timedelta(seconds=age_s)
    return KeyUsage("p", "channel:api", key, executing, waiting, 2, oldest)


def test_over_cap_counts_what_is_queued_and_what_the_batch_adds() -> None:
    assert over_cap(3, {"a": 2}, Counter({"a": 1, "b": 3})) == []
    assert over_cap(3, {"a": 3}, Counter({"a": 1})) == ["a"]
    assert over_cap(3, {}, Counter({"b": 4, "a": 4})) == ["a", "b"]


def test_keys_sample_has_executing_and_waiting_per_key() -> None:
    assert keys_sample([usage("k", 2, 5, 1.0)]) == {
        ("p", "k", "executing"): 2.0,
        ("p", "k", "waiting"): 5.0,
    }


def test_stuck_keys_wait_with_nothing_executing() -> None:
    found = stuck(
        [
            usage("full", 2, 9, 600),  # at its limit, executing: moving
            usage("wedged", 0, 3, 600),
            usage("fresh", 0, 3, 5),  # waited 5 s: the next poll takes it
            usage("idle", 1, 0, None),
        ],
        NOW,
        60,
    )
    assert [u.key for u in found] == ["wedged"]
