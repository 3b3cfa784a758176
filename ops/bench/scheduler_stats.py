"""The pure parts of the scheduler benchmark (``scheduler.py``): the shapes, the interleaved
order of the measurements, the runs' customer ids, latency percentiles, the medians over
rounds with the ratio new/old, and the claim latency's flatness in the number of keys. No I/O;
unit-tested in tests/unit/test_bench_scheduler.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

SIDES = ("new", "old")  # the checkout under test, then the baseline revision
# The figures of one measurement that the summary takes medians of (see scheduler.measure).
FIGURES = (
    "runs_per_s",
    "scheduler_cpu_ms_per_run",
    "worker_cpu_ms_per_run",
    "relay_cpu_ms_per_run",
    "postgres_backends_cpu_ms_per_run",
    "claim_p50_ms",
    "claim_p99_ms",
    "burst_claim_p50_ms",
    "burst_claim_p99_ms",
)


def parse_shapes(text: str) -> list[int]:
    """The numbers of distinct keys to measure (``0``: no concurrency limit), in order given;
    ValueError on anything but distinct integers >= 0."""
    shapes = [int(part) for part in text.split(",") if part.strip()]
    if not shapes or any(s < 0 for s in shapes) or len(set(shapes)) != len(shapes):
        raise ValueError(f"--shapes: distinct integers >= 0, got {text!r}")
    return shapes


def customer_id(n: int, keys: int) -> str:
    """The ``input.customer_id`` of the run number ``n`` of a shape with ``keys`` distinct keys
    (round robin; with 0 keys there is no limit and every run has its own id)."""
    return f"c{n % keys if keys else n}"


def schedule(
    rounds: int, shapes: Sequence[T], sides: Sequence[str] = SIDES
) -> list[tuple[int, T, str]]:
    """The order of the measurements: ``(round, shape, side)``, each shape's sides next to
    each other, in the order given in even rounds and reversed in odd ones (A, B in round 0,
    B, A in round 1, ...), so that a drift of the machine, or an advantage of going first or
    second, hits both sides alike."""
    return [
        (r, shape, side)
        for r in range(rounds)
        for shape in shapes
        for side in (sides if r % 2 == 0 else sides[::-1])
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile of the other benchmarks (cost_measure, worker.py)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(ms: Sequence[float]) -> dict[str, Any]:
    """Runs, p50, p99 and max of latencies in ms."""
    return {
        "runs": len(ms),
        "p50_ms": round(percentile(ms, 0.5), 3) if ms else None,
        "p99_ms": round(percentile(ms, 0.99), 3) if ms else None,
        "max_ms": round(max(ms), 3) if ms else None,
    }


def median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def ratio(new: float | None, old: float | None) -> float | None:
    """new / old, None when either is missing or old is 0."""
    if new is None or not old:
        return None
    return round(new / old, 3)


def summarize(
    measurements: Sequence[Mapping[str, Any]],
    shapes: Sequence[Any],
    sides: Sequence[str] = SIDES,
    figures: Sequence[str] = FIGURES,
    by: str = "keys",
) -> dict[str, Any]:
    """Each side's median of each figure per shape over the rounds, and the ratio of the first
    side to the second (new / old) per shape. ``measurements``: dicts with ``side``, the
    shape under ``by`` and the ``figures``."""
    medians: dict[str, dict[str, dict[str, float | None]]] = {}
    for side in sides:
        medians[side] = {}
        for shape in shapes:
            mine = [m for m in measurements if m["side"] == side and m[by] == shape]
            medians[side][str(shape)] = {f: median([m.get(f) for m in mine]) for f in figures} | {
                "rounds": len(mine)
            }
    out: dict[str, Any] = {"medians": medians}
    if len(sides) == 2:
        a, b = sides
        out[f"ratio_{a}_to_{b}"] = {
            str(shape): {
                f: ratio(medians[a][str(shape)][f], medians[b][str(shape)][f]) for f in figures
            }
            for shape in shapes
        }
    return out


def flatness(medians: Mapping[str, Mapping[str, Any]], shapes: Sequence[int]) -> dict[str, Any]:
    """The claim latency (paced) of the fewest keys (at least 1) against the most, per side:
    their p50 and p99 and the ratio most / fewest (1.0: flat in the number of keys)."""
    keyed = sorted(s for s in shapes if s > 0)
    if len(keyed) < 2:
        return {}
    low, high = str(keyed[0]), str(keyed[-1])
    out: dict[str, Any] = {"fewest_keys": keyed[0], "most_keys": keyed[-1]}
    for side, per_shape in medians.items():
        lo, hi = per_shape[low], per_shape[high]
        out[side] = {
            f"keys_{low}": {"p50_ms": lo["claim_p50_ms"], "p99_ms": lo["claim_p99_ms"]},
            f"keys_{high}": {"p50_ms": hi["claim_p50_ms"], "p99_ms": hi["claim_p99_ms"]},
            "ratio_p50": ratio(hi["claim_p50_ms"], lo["claim_p50_ms"]),
            "ratio_p99": ratio(hi["claim_p99_ms"], lo["claim_p99_ms"]),
        }
    return out
