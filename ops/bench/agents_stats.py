"""The pure parts of the agents benchmark (``agents.py``): the shapes and their parameters, the
ideal wall time, each step's overhead from the journal's model calls, the figures per run and
per step, the worker's memory per run in flight and the targets (the worker's CPU by place from
a py-spy profile: ``agents_profile.py``). No I/O; unit-tested in tests/unit/test_bench_agents.py.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Shape:
    """One measurement: ``runs`` runs of ``steps`` journaled steps, each one model call of
    ``call_s`` seconds, ``concurrency`` runs in flight in all (split evenly over ``workers``
    worker processes: each gets ``--concurrency concurrency / workers``)."""

    runs: int
    concurrency: int
    steps: int
    call_s: float
    workers: int = 1
    jitter_s: float = 0.0  # each call also waits its prompt's share of this (local.jitter_share)

    @property
    def per_worker(self) -> int:
        return self.concurrency // self.workers

    @property
    def delay_ms(self) -> int:
        return round(self.call_s * 1000)

    @property
    def jitter_ms(self) -> int:
        return round(self.jitter_s * 1000)

    @property
    def mean_call_s(self) -> float:
        """A model call's mean time: the delay and half the jitter (its shares are uniform)."""
        return self.call_s + self.jitter_s / 2

    @property
    def ideal_s(self) -> float:
        """Every slot busy with model calls from the first instant to the last."""
        return self.runs * self.steps * self.mean_call_s / self.concurrency


def _share(run: str, i: int) -> float:
    # Imported here: the handlers import this module in every checkout a benchmark runs,
    # older ones too, whose local model may have no jitter.
    from awooop.llm.local import jitter_share

    return jitter_share(step_prompt(run, i))


def step_prompt(run: object, i: int) -> str:
    """Step ``i``'s prompt in the benchmark's handlers: the run's own, so that the local model's
    jitter (a hash of the prompt) spreads the runs' answers, and :func:`step_overheads` knows
    each call's model time."""
    return f"step {i} of {run}"


SHAPES = {
    "a": Shape(runs=2_000, concurrency=1_000, steps=3, call_s=1.0),
    "b": Shape(runs=10_000, concurrency=5_000, steps=3, call_s=2.0),
}
FLAGS = ("runs", "concurrency", "steps", "call_s", "workers", "jitter_s")


def plan(shape: str | None, overrides: Mapping[str, Any]) -> dict[str, Shape]:
    """The shapes to measure, by name. ``shape``: ``a``, ``b``, ``all`` or None; ``overrides``:
    the explicit flags (``FLAGS``; None: not given), applied to every shape measured. With
    flags and no ``--shape``, one shape named ``custom``: shape a with the flags. ValueError
    on an unknown shape or a value out of range."""
    given = {k: v for k, v in overrides.items() if k in FLAGS and v is not None}
    if shape is None:
        names = ["custom"] if given else list(SHAPES)
    elif shape == "all":
        names = list(SHAPES)
    elif shape in SHAPES:
        names = [shape]
    else:
        raise ValueError(f"--shape: a, b or all, got {shape!r}")
    out = {n: replace(SHAPES.get(n, SHAPES["a"]), **given) for n in names}
    for name, s in out.items():
        if min(s.runs, s.concurrency, s.steps, s.workers) < 1 or min(s.call_s, s.jitter_s) < 0:
            raise ValueError(
                f"shape {name}: runs, concurrency, steps, workers >= 1, call and jitter >= 0"
            )
        if s.concurrency % s.workers:
            raise ValueError(
                f"shape {name}: --concurrency {s.concurrency} must split evenly over "
                f"{s.workers} worker processes"
            )
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile of the other benchmarks (cost_measure, scheduler_stats)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(ms: Sequence[float]) -> dict[str, Any]:
    """Count, p50, p99 and max of durations in ms (None where there are none)."""
    return {
        "count": len(ms),
        "p50_ms": round(percentile(ms, 0.5), 2) if ms else None,
        "p99_ms": round(percentile(ms, 0.99), 2) if ms else None,
        "max_ms": round(max(ms), 2) if ms else None,
    }


@dataclass(frozen=True)
class Call:
    """One ``ModelCalled`` of the journal: its run, when the call started (unix seconds, the
    worker's clock) and how long it took through the gateway (pointer check included when it
    came before the start: ``awooop.llm.gateway``)."""

    run: str
    started: float
    duration_s: float

    @property
    def answered(self) -> float:
        return self.started + self.duration_s


def step_overheads(
    calls: Iterable[Call],
    call_s: float,
    waits: Mapping[str, Sequence[float]] | None = None,
    jitter_s: float = 0.0,
) -> dict[str, list[float]]:
    """Per pair of consecutive model calls of a run, in ms:

    - ``overhead``: from one call's answer to the next call's model call, i.e. the time between
      the two answers less the model's own time (``call_s``, and with ``jitter_s`` the call's
      share of it: the run's i-th call is :func:`step_prompt` of step i): the record of the
      call, the step's journal write, the next step's start, the pointer check and the event
      loop's lag;
    - ``between_calls``: its part outside the gateway (one answer to the next call's start:
      the ``ModelCalled`` and ``StepCompleted`` writes, the handler);
    - ``in_gateway``: its part inside the gateway (the next call's duration less its model
      time: the pointer check and the lateness of the model's timer, i.e. the loop's lag).

    ``gateway_extra`` has the last of these for every call (also the first of each run). A
    pair with one of the run's ``waits`` (the times its waits began) between the two calls
    goes to ``across_wait`` instead of the three above (its ``overhead``: the wait included)."""
    by_run: dict[str, list[Call]] = {}
    for call in calls:
        by_run.setdefault(call.run, []).append(call)
    out: dict[str, list[float]] = {
        "overhead": [],
        "between_calls": [],
        "in_gateway": [],
        "gateway_extra": [],
    }
    if waits is not None:
        out["across_wait"] = []
    for run, mine in by_run.items():
        mine.sort(key=lambda c: c.started)
        began = waits.get(run, ()) if waits is not None else ()
        model = [call_s + jitter_s * _share(run, i) for i in range(len(mine))]
        extra = ((c.duration_s - m) * 1000 for c, m in zip(mine, model, strict=True))
        out["gateway_extra"].extend(extra)
        for i, (prev, nxt) in enumerate(itertools.pairwise(mine), start=1):
            overhead = (nxt.answered - prev.answered - model[i]) * 1000
            if any(prev.answered <= at <= nxt.started for at in began):
                out["across_wait"].append(overhead)
                continue
            out["overhead"].append(overhead)
            out["between_calls"].append((nxt.started - prev.answered) * 1000)
            out["in_gateway"].append((nxt.duration_s - model[i]) * 1000)
    return out


def run_edges(
    claimed: Mapping[str, float],
    started: Mapping[str, float],
    calls: Iterable[Call],
    completed: Mapping[str, float],
    last_claimed: Mapping[str, float] | None = None,
) -> dict[str, list[float]]:
    """Per run, in ms: ``to_first_call``, from its claim (the ``RunClaimed`` transaction's
    start) to its first model call's start, in two parts: ``claim_to_handler`` (to the
    handler's start, ``started``) and ``handler_to_first_call``; and ``after_last_answer``,
    from its last answer to its completion (the ``RunCompleted`` transaction's start). Unix
    seconds; one host. A run of several attempts (a wait between them) has ``started`` of its
    last attempt: ``claim_to_handler`` is then from that attempt's claim (``last_claimed``)
    and ``handler_to_first_call`` to that attempt's first call (its journaled steps replayed
    before it)."""
    last_claimed = claimed if last_claimed is None else last_claimed
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    resumed: dict[str, float] = {}  # each run's first call at or after its handler's start
    for call in calls:
        first[call.run] = min(first.get(call.run, call.started), call.started)
        last[call.run] = max(last.get(call.run, call.answered), call.answered)
        if call.run in started and call.started >= started[call.run]:
            resumed[call.run] = min(resumed.get(call.run, call.started), call.started)
    return {
        "to_first_call": [(first[r] - at) * 1000 for r, at in claimed.items() if r in first],
        "claim_to_handler": [
            (started[r] - at) * 1000 for r, at in last_claimed.items() if r in started
        ],
        "handler_to_first_call": [
            (resumed[r] - at) * 1000 for r, at in started.items() if r in resumed
        ],
        "after_last_answer": [(at - last[r]) * 1000 for r, at in completed.items() if r in last],
    }


def repeated(
    claims: Mapping[str, int],
    calls: Mapping[str, int],
    steps: Mapping[tuple[str, str], int],
    per_run: int,
    attempts: int = 1,
) -> dict[str, int]:
    """Runs executed more than once, by what shows it: claimed more than once (more than
    ``attempts`` times: a run that waits takes two), more model calls than steps, a step
    journaled twice; ``any``: runs with at least one of these."""
    twice = {r for r, n in claims.items() if n > attempts}
    more = {r for r, n in calls.items() if n > per_run}
    again = {r for (r, _step), n in steps.items() if n > 1}
    return {
        "claimed_more_than_once": len(twice),
        "more_model_calls_than_steps": len(more),
        "step_journaled_twice": len(again),
        "any": len(twice | more | again),
    }


_CLIENT = re.compile(r"^postgres: \S+ (?P<database>\S+) (\S+\(\d+\)|\[local\])")


def postgres_role(title: str, database: str) -> str:
    """A Postgres process by its title: a client backend of the benchmark's ``database``
    (``postgres_backends``), of another database (``postgres_backends_other``), or the server's
    own processes (``postgres_other``: postmaster, checkpointer, WAL writer, autovacuum)."""
    match = _CLIENT.match(title)
    if match is None:
        return "postgres_other"
    return "postgres_backends" if match["database"] == database else "postgres_backends_other"


# The runtime's processes: the workers, the relay, the timers loop (the sleeping agent's) and
# the benchmark database's Postgres backends (the benchmark's, the producer's and the
# reviewer's connections are named apart).
RUNTIME_ROLES = ("worker", "relay", "timers", "postgres_backends")


def per_unit(cpu_s: Mapping[str, float], runs: int, steps: int) -> dict[str, dict[str, float]]:
    """CPU seconds per role as ms per run and ms per step (``runs`` x ``steps`` steps), with
    ``runtime``: the sum of ``RUNTIME_ROLES``."""
    runtime = sum(cpu_s.get(r, 0.0) for r in RUNTIME_ROLES)
    every = {**cpu_s, "runtime": runtime}
    return {
        "per_run_ms": {r: round(s * 1000 / runs, 3) for r, s in sorted(every.items())},
        "per_step_ms": {r: round(s * 1000 / (runs * steps), 4) for r, s in sorted(every.items())},
    }


def rss_per_in_flight_kb(idle_kb: Sequence[int], peak_kb: Sequence[int], in_flight: int) -> float:
    """The workers' memory per run in flight: the sum over the worker processes of their peak
    resident set less their idle one, divided by the runs in flight in all."""
    grown = sum(max(0, peak - idle) for idle, peak in zip(idle_kb, peak_kb, strict=True))
    return round(grown / in_flight, 2)


def xacts_per_step(
    committed: int, idle_per_s: float, idle_s: float, steps: int
) -> dict[str, float]:
    """Committed transactions of the benchmark database per step: ``gross`` (``committed``,
    the benchmark's own left out) and ``net`` (less the idle rate ``idle_per_s`` over the
    ``idle_s`` seconds of the count that were not the measurement: heartbeats, polls)."""
    gross = committed
    return {
        "gross": round(gross / steps, 3),
        "net": round((gross - idle_per_s * idle_s) / steps, 3),
    }


# The aims the benchmark is measured against (docs/benchmarks.md): wall time against the ideal
# at 5,000 runs in flight, the runtime's CPU per step, the workers' memory per run in flight
# and the step overhead's p99 at 1,000 in flight.
TARGETS = {
    "wall_to_ideal": 1.15,
    "runtime_cpu_ms_per_step": 0.5,
    "rss_kb_per_in_flight": 16.0,
    "step_overhead_p99_ms": 20.0,
}


def targets(summary: Mapping[str, Any], concurrency: int) -> dict[str, Any]:
    """Each target with this measurement's figure and whether it is met (the wall time's at
    5,000 in flight and the overhead's at 1,000 in flight: None, not judged, elsewhere)."""
    out: dict[str, Any] = {}
    for name, bound in TARGETS.items():
        value = summary.get(name)
        judged = not (
            (name == "wall_to_ideal" and concurrency < 5_000)
            or (name == "step_overhead_p99_ms" and concurrency < 1_000)
        )
        met = None if value is None or not judged else bool(value <= bound)
        out[name] = {"target": bound, "value": value, "met": met}
    return out
