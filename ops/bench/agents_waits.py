"""The pure parts of the agents benchmark's waiting agents (``agents.py --agent sleep|approval``):
what each agent runs, the ideal wall time with a wait, and the figures of the waits read from
the journal (how many runs slept at once beside the attempts, the time from the end of a wait
to the run's next claim, the waits and decisions made more than once). No I/O; unit-tested in
tests/unit/test_bench_agents_waits.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents_stats import spread  # a sibling (the benchmark puts this folder on the path)

AGENTS = ("llm", "approval", "sleep")
API_HANDLERS = {"llm_step": "agent_llm_steps", "step": "agent_steps"}  # --api, agent llm
WAIT_HANDLERS = {"approval": "agent_approvals", "sleep": "agent_sleeps"}
WARMUP_SLEEP_S = 0.3  # the warm-up runs' sleep (as sleeps.py's)
# The journal's events that begin and end each agent's wait, and that end an attempt.
WAITS = {
    "approval": ("ApprovalRequested", "ApprovalGranted"),
    "sleep": ("WaitStarted", "TimerFired"),
}
ATTEMPT_ENDS = ("WaitStarted", "ApprovalRequested", "RunCompleted")


@dataclass(frozen=True)
class Agent:
    """What each run of the burst does (``--agent``, ``--api``): the worker's handler, the
    fields the runs' input gets (``fields``; the warm-up runs' ``warmup_fields``), the wait the
    ideal wall time accounts for (``wait_s``: the sleep; an approval counts as immediate), the
    attempts a run takes (``attempts``: one, or two with a wait), and whether the burst needs
    the timers loop (``timers``) or the benchmark's reviewer (``reviewer``)."""

    name: str
    handler: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    warmup_fields: Mapping[str, Any] = field(default_factory=dict)
    wait_s: float = 0.0
    attempts: int = 1
    timers: bool = False
    reviewer: bool = False


def agent_of(name: str, api: str, sleep_s: float) -> Agent:
    """The agent ``name`` (``llm``, ``approval``, ``sleep``) writing its steps as ``api``
    says; ValueError on an unknown one or a sleep under 0.1 s (then no wait to measure)."""
    if api not in API_HANDLERS:
        raise ValueError(f"--api: {', '.join(sorted(API_HANDLERS))}, got {api!r}")
    if name == "llm":
        return Agent("llm", API_HANDLERS[api])
    if name not in WAIT_HANDLERS:
        raise ValueError(f"--agent: {', '.join(AGENTS)}, got {name!r}")
    handler = WAIT_HANDLERS[name]
    if name == "approval":
        return Agent(name, handler, {"api": api}, {"api": api}, attempts=2, reviewer=True)
    if sleep_s < 0.1:
        raise ValueError(f"--sleep-s: at least 0.1, got {sleep_s}")
    fields = {"api": api, "sleep_s": sleep_s}
    warmup = {"api": api, "sleep_s": WARMUP_SLEEP_S}
    return Agent(name, handler, fields, warmup, wait_s=sleep_s, attempts=2, timers=True)


def ideal_s(runs: int, concurrency: int, steps: int, call_s: float, wait_s: float) -> float:
    """The wall time with every slot busy and no overhead: the model time over the slots
    (``runs`` x ``steps`` x ``call_s`` / ``concurrency``). With a wait after each run's first
    step (``wait_s`` > 0; a waiting run holds no slot) the burst also lasts at least until the
    last first step (``runs`` x ``call_s`` / ``concurrency``), that run's wait and its
    remaining steps: the larger of the two."""
    work = runs * steps * call_s / concurrency
    if wait_s <= 0:
        return work
    return max(work, runs * call_s / concurrency + wait_s + (steps - 1) * call_s)


@dataclass(frozen=True)
class Event:
    """One event of a run's stream in the journal: its run, type and time (unix seconds, the
    writing transaction's start)."""

    run: str
    kind: str
    at: float


def by_run(events: Iterable[Event]) -> dict[str, list[Event]]:
    """The events per run, in the order given (the log's)."""
    out: dict[str, list[Event]] = {}
    for e in events:
        out.setdefault(e.run, []).append(e)
    return out


def began(agent: str, events: Iterable[Event]) -> dict[str, list[float]] | None:
    """Per run, when its waits began (None for an agent that does not wait)."""
    if agent not in WAITS:
        return None
    out: dict[str, list[float]] = {}
    for e in events:
        if e.kind == WAITS[agent][0]:
            out.setdefault(e.run, []).append(e.at)
    return out


def to_next_claim(runs: Mapping[str, Sequence[Event]], after: str) -> list[float]:
    """Per ``after`` event (``TimerFired``, ``ApprovalGranted``), the ms to the run's next
    ``RunClaimed``: how long a run whose wait ended waited for a worker."""
    out: list[float] = []
    for events in runs.values():
        woke: float | None = None
        for e in events:
            if e.kind == after:
                woke = e.at
            elif e.kind == "RunClaimed" and woke is not None:
                out.append((e.at - woke) * 1000)
                woke = None
    return out


def between(runs: Mapping[str, Sequence[Event]], start: str, end: str) -> list[tuple[float, float]]:
    """The intervals from each ``start`` event of a run to its next ``end`` event (one of
    several types: ``end`` split on ``|``)."""
    ends = set(end.split("|"))
    out: list[tuple[float, float]] = []
    for events in runs.values():
        begun: float | None = None
        for e in events:
            if e.kind == start and begun is None:
                begun = e.at
            elif e.kind in ends and begun is not None:
                out.append((begun, e.at))
                begun = None
    return out


def occupancy(
    waits: Sequence[tuple[float, float]], attempts: Sequence[tuple[float, float]], concurrency: int
) -> dict[str, Any]:
    """How many runs waited at once (``waits``: each run's interval in its wait) beside the
    attempts (``attempts``: a claim to the attempt's end), ends before starts at one instant:

    - ``waiting_max``, ``in_attempt_max``: the most at once of each; ``occupied_max``: the most
      runs waiting or in an attempt at once (a worker never runs more attempts than its slots,
      so this is above ``concurrency`` only if waiting runs held no slot);
    - ``slots_held_while_waiting``: the fewest slots left free by the attempts (at most the
      runs waiting then) at any moment runs waited: an upper bound of the slots the waiting
      runs held throughout. 0: at some moment every slot ran an attempt while runs waited.
      Only more runs than slots can show it: with fewer, slots stay free anyway. None when
      no run waited."""
    points = [(a, 1, 0) for a, _ in waits] + [(b, -1, 0) for _, b in waits]
    points += [(a, 1, 1) for a, _ in attempts] + [(b, -1, 1) for _, b in attempts]
    points.sort(key=lambda p: (p[0], p[1]))  # at one instant, ends (-1) first
    counts, most = [0, 0], [0, 0]
    occupied_max = 0
    held: int | None = None
    last = points[0][0] if points else 0.0
    for at, step, kind in points:
        waiting, in_attempt = counts
        if at > last and waiting > 0:  # the counts held from ``last`` to ``at``
            free = min(waiting, max(0, concurrency - in_attempt))
            held = free if held is None else min(held, free)
        last = at
        counts[kind] += step
        most[kind] = max(most[kind], counts[kind])
        occupied_max = max(occupied_max, counts[0] + counts[1])
    return {
        "waiting_max": most[0],
        "in_attempt_max": most[1],
        "occupied_max": occupied_max,
        "slots_held_while_waiting": held,
    }


def repeats(runs: Mapping[str, Sequence[Event]], begin: str, end: str) -> dict[str, int]:
    """Runs whose wait began more than once (``begin``), ended more than once (``end``: fired
    or approved twice), were claimed more than once after it first ended (resumed twice), or
    never saw it end."""
    out = Counter(
        waited_more_than_once=0, ended_more_than_once=0, resumed_more_than_once=0, not_ended=0
    )
    for events in runs.values():
        kinds = Counter(e.kind for e in events)
        ended = next((i for i, e in enumerate(events) if e.kind == end), None)
        resumed = 0 if ended is None else sum(e.kind == "RunClaimed" for e in events[ended:])
        out["waited_more_than_once"] += kinds[begin] > 1
        out["ended_more_than_once"] += kinds[end] > 1
        out["resumed_more_than_once"] += resumed > 1
        out["not_ended"] += ended is None
    return dict(out)


# The summary's names of each agent's wait figures.
NAMES = {
    "sleep": {"end": "wake", "waiting": "asleep", "ended": "fired"},
    "approval": {"end": "approve", "waiting": "awaiting_approval", "ended": "approved"},
}


def wait_figures(
    agent: str, events: Iterable[Event], concurrency: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summary's figures of the waiting ``agent`` and its ``waits`` section, from the
    burst's ``events`` (the log's order) on ``concurrency`` slots:

    - ``<end>_to_resume`` (``wake``: ``TimerFired``, ``approve``: ``ApprovalGranted``, to the
      run's next ``RunClaimed``), p50/p99;
    - ``waited`` (the wait's begin to its end: the sleep, or the approval's request to its
      decision), p50/p99;
    - the occupancy (:func:`occupancy`): ``<waiting>_max`` and ``slots_held_while_<waiting>``;
    - the repeats (:func:`repeats`): ``<ended>_twice``, ``resumed_twice``."""
    begin, end = WAITS[agent]
    names = NAMES[agent]
    mine = by_run(events)
    resume = spread(to_next_claim(mine, end))
    waits = between(mine, begin, end)
    attempts = between(mine, "RunClaimed", "|".join(ATTEMPT_ENDS))
    held = occupancy(waits, attempts, concurrency)
    again = repeats(mine, begin, end)
    summary = {
        f"{names['end']}_to_resume_p50_ms": resume["p50_ms"],
        f"{names['end']}_to_resume_p99_ms": resume["p99_ms"],
        f"{names['waiting']}_max": held["waiting_max"],
        f"slots_held_while_{names['waiting']}": held["slots_held_while_waiting"],
        f"{names['ended']}_twice": again["ended_more_than_once"],
        "resumed_twice": again["resumed_more_than_once"],
    }
    section = {
        "events": [begin, end],
        f"{names['end']}_to_resume": resume,
        "waited": spread([(b - a) * 1000 for a, b in waits]),
        "occupancy": {**held, "concurrency": concurrency},
        "repeats": again,
    }
    return summary, section
