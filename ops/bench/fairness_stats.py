"""The pure parts of the fairness benchmark (``fairness.py``): its measures and figures, the two
projects in one shard, the start latency's figures and the targets. No I/O; unit-tested in
tests/unit/test_bench_fairness.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from awooop.streams.keys import shard_of

MEASURES = ("contended", "alone")
TARGET_B_P99_MS = 2000.0
TARGET_RUNS_PER_S_RATIO = 0.9  # new at least 90 % of old, project A alone
FIGURES = (
    "runs_per_s",
    "seconds",
    "scheduler_cpu_ms_per_run",
    "worker_cpu_ms_per_run",
    "relay_cpu_ms_per_run",
    "postgres_backends_cpu_ms_per_run",
    "b_start_p50_ms",
    "b_start_p99_ms",
    "b_start_max_ms",
    "a_start_p50_ms",
    "a_start_p99_ms",
    "a_start_max_ms",
    "waiting_at_b_submit",
)


def same_shard_pair(shard_count: int, a: str = "bench-a", b: str = "bench-b") -> tuple[str, str]:
    """Project ``a`` and the first of ``b``, ``b1``, ``b2``, ... in the same shard as ``a``."""
    if shard_count < 1:
        raise ValueError(f"shard count {shard_count} < 1")
    shard = shard_of(a, shard_count)
    for n in itertools.count():
        candidate = f"{b}{n or ''}"
        if candidate != a and shard_of(candidate, shard_count) == shard:
            return a, candidate
    raise AssertionError("unreachable")  # pragma: no cover


def start_figures(prefix: str, latency: Mapping[str, Any]) -> dict[str, Any]:
    """``scheduler_stats.latency``'s figures (``runs``, ``p50_ms``, ...) of one project's start
    latency as ``<prefix>_start_runs``, ``<prefix>_start_p50_ms``, ..."""
    return {f"{prefix}_start_{k}": v for k, v in latency.items()}


def targets(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The two targets from the summary: B's p99 with fair share (``new``, contended) under
    TARGET_B_P99_MS, and A alone at least TARGET_RUNS_PER_S_RATIO of ``old``'s runs/s."""
    b_p99 = summary["medians"]["new"]["contended"]["b_start_p99_ms"]
    ratio = summary["ratio_new_to_old"]["alone"]["runs_per_s"]
    return {
        "b_start_p99_ms_new": b_p99,
        "b_start_p99_ms_old": summary["medians"]["old"]["contended"]["b_start_p99_ms"],
        "b_start_p99_under_ms": TARGET_B_P99_MS,
        "b_start_p99_met": b_p99 is not None and b_p99 < TARGET_B_P99_MS,
        "alone_runs_per_s_ratio": ratio,
        "alone_cpu_ms_per_run_ratio": summary["ratio_new_to_old"]["alone"][
            "scheduler_cpu_ms_per_run"
        ],
        "alone_runs_per_s_ratio_at_least": TARGET_RUNS_PER_S_RATIO,
        "alone_runs_per_s_met": ratio is not None and ratio >= TARGET_RUNS_PER_S_RATIO,
    }


# The runs waiting when B submits (the benchmark's own statement, on its own connection).
WAITING = "SELECT count(*) FROM awooop_run_state WHERE status IN ('PENDING', 'RESUMED')"
