"""The agents benchmark's measurement of one shape (``agents.py``): the warm-up, the burst (its
CPU window, the workers' memory, the statuses), the journal of the burst's runs, ``awooop
replay run_state --verify``, and the figures made of them (:func:`figures`, :func:`finish`).
Imported by ``agents.py``, which puts this folder and the checkout on the path.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import agents_profile
import agents_stats as stats
import agents_waits as waits
import cost_measure as measure
from agents_review import APPLICATION, REVIEWER_BACKENDS, Reviewer
from agents_stack import TERMINAL, AgentStack, Producer, Profiler, proc_status, reset_peak
from cost import Servers

TICK = os.sysconf("SC_CLK_TCK")
JOURNAL = """/* agents-bench */
SELECT substr(stream_id, 5) AS run, event_type,
       extract(epoch FROM recorded_at)::float8 AS at,
       extract(epoch FROM (data->>'started_at')::timestamptz)::float8 AS started,
       (data->>'duration_ms')::float8 / 1000 AS duration_s,
       data->>'outcome' AS outcome, data->>'step' AS step
FROM awooop_events
WHERE position > $1 AND stream_id LIKE 'run-%'
  AND event_type IN ('RunClaimed', 'ModelCalled', 'StepCompleted', 'RunCompleted',
                     'WaitStarted', 'TimerFired', 'ApprovalRequested', 'ApprovalGranted')
ORDER BY position
"""
# The events of the waits' figures (agents_waits): the claims, the attempts' ends, the waits.
WAIT_EVENTS = ("RunClaimed", *waits.ATTEMPT_ENDS, "TimerFired", "ApprovalGranted")


async def burst(
    stack: AgentStack,
    producer: Producer,
    args: argparse.Namespace,
    profiler: Profiler | None,
    reviewer: Reviewer | None,
) -> dict[str, Any]:
    """Submit the shape's runs, wait until each has ended (the reviewer approving meanwhile);
    the CPU window, RSS samples, the commit time and the ids."""
    shape = stack.shape
    expected = sum((await stack.statuses()).values()) + shape.runs
    before: dict[str, Any] = {}
    ideal = waits.ideal_s(
        shape.runs, shape.concurrency, shape.steps, shape.mean_call_s, stack.agent.wait_s
    )

    def at_commit() -> None:
        if profiler is not None:
            profiler.start()
        before["procs"] = measure.snapshot()
        before["machine"] = measure.machine_ticks()

    if reviewer is not None:
        reviewer.start()
    ids = await producer.submit(shape.runs, shape.steps, args.batch, at_commit)
    committed_at = time.time()
    deadline = time.monotonic() + max(300.0, 10 * ideal + 120)
    rss_max = dict.fromkeys(stack.workers, 0)
    running_max, ended = 0, 0
    while time.monotonic() < deadline:
        for pid in stack.workers:
            rss_max[pid] = max(rss_max[pid], proc_status(pid, "VmRSS") or 0)
        statuses = await stack.statuses()
        running_max = max(running_max, statuses.get("RUNNING", 0))
        ended = sum(statuses.get(s, 0) for s in TERMINAL)
        if ended >= expected:
            break
        await asyncio.sleep(0.25)
    after, machine_after = measure.snapshot(), measure.machine_ticks()
    ended_at = time.time()
    if reviewer is not None:
        await reviewer.stop()
    raw = profiler.stop() if profiler is not None else ""
    return {
        "ids": ids,
        "committed_at": committed_at,
        "window_s": ended_at - committed_at,
        "ended_at": ended_at,
        "timed_out": ended < expected,
        "before": before,
        "after": {"procs": after, "machine": machine_after},
        "rss_sampled_max": [rss_max[p] for p in stack.workers],
        "running_max": running_max,
        "raw_profile": raw,
    }


def cpu_split(stack: AgentStack, window: dict[str, Any]) -> dict[str, float]:
    """CPU seconds per role over the burst (:mod:`cost_measure`'s snapshots)."""
    before, after = window["before"]["procs"], window["after"]["procs"]
    procs = {**before, **after}
    roles = dict(stack.pids)
    postmaster = stack.servers.postmaster()
    for pid, proc in procs.items():
        if pid in roles:
            continue
        if pid == postmaster:
            roles[pid] = "postgres_other"
        elif proc.ppid == postmaster:
            roles[pid] = stats.postgres_role(proc.title, stack.name)
    split = measure.cpu_by_role(before, after, roles, TICK)
    if split.exited:
        print(f"processes exited during the burst: {split.exited}", file=sys.stderr)
    return split.seconds


async def journal(stack: AgentStack, mark: int, ids: list[str]) -> dict[str, Any]:
    """The burst's runs as the log tells them: statuses, claims, calls, steps, completions, and
    the events of the waits (in the log's order)."""
    mine = set(ids)
    rows = [r for r in await stack.fetch(JOURNAL, mark) if r["run"] in mine]
    runs = await stack.fetch(
        "SELECT status, (result->>'started')::float8 AS started, run_id::text AS run "
        "FROM awooop_run_state WHERE run_id::text = ANY($1)",
        ids,
    )
    claims: Counter[str] = Counter()
    claimed: dict[str, float] = {}
    last_claimed: dict[str, float] = {}
    completed: dict[str, float] = {}
    calls: list[stats.Call] = []
    calls_per_run: Counter[str] = Counter()
    steps: Counter[tuple[str, str]] = Counter()
    failed_calls = 0
    for r in rows:
        kind, run = r["event_type"], r["run"]
        if kind == "RunClaimed":
            claims[run] += 1
            claimed[run] = min(claimed.get(run, r["at"]), r["at"])
            last_claimed[run] = max(last_claimed.get(run, r["at"]), r["at"])
        elif kind == "RunCompleted":
            completed[run] = r["at"]
        elif kind == "StepCompleted":
            steps[(run, r["step"])] += 1
        elif kind == "ModelCalled":
            calls_per_run[run] += 1
            failed_calls += r["outcome"] != "ok"
            calls.append(stats.Call(run, r["started"], r["duration_s"]))
    return {
        "statuses": dict(Counter(r["status"] for r in runs)),
        "started": {r["run"]: r["started"] for r in runs if r["started"] is not None},
        "claims": claims,
        "claimed": claimed,
        "last_claimed": last_claimed,
        "completed": completed,
        "calls": calls,
        "calls_per_run": calls_per_run,
        "steps": steps,
        "failed_calls": failed_calls,
        "waits": [
            waits.Event(r["run"], r["event_type"], r["at"])
            for r in rows
            if r["event_type"] in WAIT_EVENTS
        ],
    }


def verify(stack: AgentStack) -> dict[str, Any]:
    """``awooop replay run_state --verify`` (the processes stopped): the live run state equals
    its rebuild from the log. (The other projections are built by ``awooop projector``
    processes, which the benchmark does not run.)"""
    done = stack.cli("replay", "run_state", "--verify")
    text = (done.stdout + done.stderr).strip().splitlines()
    return {"exit_code": done.returncode, "last_lines": text[-3:]}


async def warm_up(
    stack: AgentStack, producer: Producer, args: argparse.Namespace, reviewer: Reviewer | None
) -> None:
    """``--warmup`` runs of one step through the agent's path (its wait included: a short
    sleep, or the reviewer's approval), then ``--settle`` seconds."""
    if reviewer is not None:
        await reviewer.open()
        reviewer.start()
    await producer.submit(args.warmup, 1, args.batch, warmup=True)
    await stack.wait_ended(args.warmup)
    if reviewer is not None:
        await reviewer.stop()
    await asyncio.sleep(args.settle)  # counters flushed; the workers idle


async def measure_shape(
    servers: Servers, shape: stats.Shape, agent: waits.Agent, args: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    notes: list[str] = []
    async with AgentStack(servers, shape, logs, agent) as stack:
        producer = Producer(stack)
        await producer.open()
        reviewer = Reviewer(stack.url) if agent.reviewer else None
        try:
            await warm_up(stack, producer, args, reviewer)
            await stack.value("SELECT pg_stat_statements_reset()::text")
            xact0, at0 = await stack.xacts()
            idle_rss = [proc_status(p, "VmRSS") or 0 for p in stack.workers]
            if not all(reset_peak(p) for p in stack.workers):
                notes.append("VmHWM could not be reset: peak RSS is the sampled VmRSS only")
            mark = await stack.value("SELECT coalesce(max(position), 0) FROM awooop_events")
            profiler = None
            if args.profile:
                profiler = Profiler(stack.workers, args.profile_rate, logs)
                if not profiler.available:
                    notes.append(
                        "profile skipped: py-spy is not installed (pip install py-spy), and the "
                        "runtime has no profiling hook of its own"
                    )
                    profiler = None
            window = await burst(stack, producer, args, profiler, reviewer)
            if reviewer is not None:  # its connections' backends, named apart
                backends = await stack.fetch(REVIEWER_BACKENDS, APPLICATION)
                stack.pids |= {r["pid"]: "reviewer_backends" for r in backends}
        finally:
            await producer.close()
            if reviewer is not None:
                await reviewer.close()
        hwm = [proc_status(p, "VmHWM") or 0 for p in stack.workers]
        peak = [max(a, b) for a, b in zip(hwm, window["rss_sampled_max"], strict=True)]
        await asyncio.sleep(args.settle)
        xact1, at1 = await stack.xacts()
        await asyncio.sleep(args.settle)
        xact2, at2 = await stack.xacts()
        statements = await stack.statements(shape.runs * shape.steps)
        log = await journal(stack, mark, window["ids"])
        await asyncio.to_thread(stack.procs.stop_all)
        replay = await asyncio.to_thread(verify, stack)
    result = figures(shape, agent, window, log, replay, cpu_split(stack, window), notes)
    if reviewer is not None:
        result["waits"]["reviewer"] = reviewer.figures()
    return result | {
        "rss": {
            "idle_kb": idle_rss,
            "peak_kb": peak,
            "hwm_kb": hwm,
            "sampled_max_kb": window["rss_sampled_max"],
        },
        "xact": {"xact0": xact0, "xact1": xact1, "xact2": xact2, "at": [at0, at1, at2]},
        "statements": statements,
    }


def figures(
    shape: stats.Shape,
    agent: waits.Agent,
    window: dict[str, Any],
    log: dict[str, Any],
    replay: dict[str, Any],
    cpu_s: dict[str, float],
    notes: list[str],
) -> dict[str, Any]:
    steps = shape.runs * shape.steps
    start = window["committed_at"]
    ends = sorted(log["completed"].values())
    claims = sorted(log["claimed"].values())
    wall = (ends[-1] - start) if ends else None
    ideal = waits.ideal_s(
        shape.runs, shape.concurrency, shape.steps, shape.mean_call_s, agent.wait_s
    )
    gaps = stats.step_overheads(
        log["calls"], shape.call_s, waits.began(agent.name, log["waits"]), shape.jitter_s
    )
    edges = stats.run_edges(
        log["claimed"], log["started"], log["calls"], log["completed"], log["last_claimed"]
    )
    cpu = stats.per_unit(cpu_s, shape.runs, shape.steps)
    before_m, after_m = window["before"]["machine"], window["after"]["machine"]
    busy_ticks = (after_m[0] - before_m[0]) - (after_m[1] - before_m[1])
    statuses = log["statuses"]
    not_completed = shape.runs - statuses.get("COMPLETED", 0)
    twice = stats.repeated(
        log["claims"], log["calls_per_run"], log["steps"], shape.steps, agent.attempts
    )
    calls_short = sum(1 for r in log["claimed"] if log["calls_per_run"][r] < shape.steps)
    overhead = stats.spread(gaps["overhead"])
    waited: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    if agent.name in waits.WAITS:
        waited = waits.wait_figures(agent.name, log["waits"], shape.concurrency)
    result = {
        "shape": {**shape.__dict__, "per_worker_concurrency": shape.per_worker},
        "summary": {
            "wall_s": round(wall, 3) if wall is not None else None,
            "ideal_s": round(ideal, 3),
            "wall_to_ideal": round(wall / ideal, 3) if wall and ideal else None,
            "runtime_cpu_ms_per_step": cpu["per_step_ms"]["runtime"],
            "worker_cpu_ms_per_step": cpu["per_step_ms"].get("worker"),
            "relay_cpu_ms_per_step": cpu["per_step_ms"].get("relay"),
            "postgres_backends_cpu_ms_per_step": cpu["per_step_ms"].get("postgres_backends"),
            "machine_cpu_ms_per_step": round(busy_ticks / TICK * 1000 / steps, 4),
            "step_overhead_p50_ms": overhead["p50_ms"],
            "step_overhead_p99_ms": overhead["p99_ms"],
            "not_completed": not_completed,
            "executed_twice": twice["any"],
            "replay_clean": replay["exit_code"] == 0,
            **waited[0],
        },
        "timing": {
            "first_claim_s": round(claims[0] - start, 3) if claims else None,
            "slots_filled_s": round(claims[shape.concurrency - 1] - start, 3)
            if len(claims) >= shape.concurrency
            else None,
            "window_s": round(window["window_s"], 3),
            "timed_out": window["timed_out"],
            "running_max": window["running_max"],
        },
        "cpu": {
            **cpu,
            "machine_busy": round(busy_ticks / max(1, after_m[0] - before_m[0]), 2),
        },
        "step_overhead": {name: stats.spread(values) for name, values in gaps.items()},
        "run_edges": {name: stats.spread(values) for name, values in edges.items()},
        "errors": {
            "statuses": statuses,
            "not_completed": not_completed,
            "executed_twice": twice,
            "fewer_model_calls_than_steps": calls_short,
            "failed_model_calls": log["failed_calls"],
        },
        "replay_verify": replay,
        "profile_raw": window["raw_profile"],
        "notes": notes,
    }
    if waited[1]:
        result["waits"] = {"agent": agent.name, **waited[1]}
    return result


def finish(result: dict[str, Any], shape: stats.Shape) -> dict[str, Any]:
    """The figures that need the whole measurement: RSS per run in flight, transactions per
    step, the targets and the profile's split."""
    rss, xact, statements = result.pop("rss"), result.pop("xact"), result.pop("statements")
    summary = result["summary"]
    summary["rss_kb_per_in_flight"] = stats.rss_per_in_flight_kb(
        rss["idle_kb"], rss["peak_kb"], shape.concurrency
    )
    at0, at1, at2 = xact["at"]
    idle_per_s = (xact["xact2"] - xact["xact1"]) / max(1e-9, at2 - at1)
    window = result["timing"]["window_s"]
    per_step = stats.xacts_per_step(
        xact["xact1"] - xact["xact0"],
        idle_per_s,
        max(0.0, (at1 - at0) - window),
        shape.runs * shape.steps,
    )
    summary["xact_per_step"] = per_step["net"]
    result["postgres"] = {
        "xact_commit_per_step": per_step,
        "idle_xact_commit_per_s": round(idle_per_s, 2),
        "statements": statements,
    }
    result["rss"] = rss
    result["targets"] = stats.targets(summary, shape.concurrency)
    raw = result.pop("profile_raw")
    if raw:
        worker_ms = summary["worker_cpu_ms_per_step"] or 0.0
        result["profile"] = agents_profile.profile_split(agents_profile.parse_raw(raw), worker_ms)
    return result
