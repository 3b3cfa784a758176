"""The load agents put on the runtime: many runs in flight, each mostly waiting on a model.

    .venv/bin/python ops/bench/agents.py [--shape a|b|all] [--runs N] [--concurrency N]
                                         [--steps N] [--call-s S] [--workers N]
                                         [--api llm_step|step]
                                         [--agent llm|approval|sleep] [--sleep-s 2]
                                         [--warmup 50] [--settle 10.5] [--batch 500]
                                         [--profile] [--profile-rate 200]
                                         [--out FILE] [--keep-logs DIR]

Prints one JSON document and keeps it in ``ops/bench/results/agents-<time>.json``. Every process
is real, on the benchmark's own PostgreSQL and Redis (``cost.Servers``, fsync on): one ``awooop
relay`` and ``--workers`` ``awooop worker`` processes, each with ``--concurrency`` divided by
the workers, the handler ``worker_handlers:agent_llm_steps`` (``--steps`` journaled
``run.llm_step`` calls: each one model call and its step in one write) or, with ``--api
step``, ``worker_handlers:agent_steps`` (each step a ``run.step`` making one ``run.llm`` call:
two writes), and the local model ``AWOOOP_LLM_URL=local:?delay_ms=D``
(``--call-s``). The shapes (``agents_stats.SHAPES``): ``a``, 2,000 runs, 1,000 in flight, 3
steps of 1 s calls; ``b``, 10,000 runs, 5,000 in flight, 3 steps of 2 s calls; ``--shape all``
(the default) measures both. Explicit flags change every shape measured; flags without
``--shape`` measure one ``custom`` shape (shape a with the flags).

``--agent`` (``agents_waits.agent_of``) says what each run does: ``llm`` (the default) its
steps one after another, as above; ``sleep`` (handler ``worker_handlers:agent_sleeps``) one
step, a durable ``run.sleep`` of ``--sleep-s`` seconds, then the other steps, with one ``awooop
loops run timers`` process (role ``timers``) to fire the sleeps; ``approval`` (handler
``worker_handlers:agent_approvals``) one step, ``run.wait_for_approval``, then the other steps,
the benchmark acting as the reviewer (``agents_review.Reviewer``: it lists the runs
WAITING_APPROVAL and approves each one with ``approvals.decide_as``, what ``awooop runs approve
--by NAME`` calls, one transaction per run, several at once). Their steps are written as
``--api`` says.

Per shape, on a fresh database: ``--warmup`` runs of one step (connections, statements; the
waiting agents' wait included: a 0.3 s sleep, or the reviewer's approval), then
``--settle`` seconds (Postgres flushes idle backends' counters within 10 s). Then ALL runs are
submitted with the producer library's ``submit_many`` (batches of ``--batch``) in ONE caller
transaction, so that they become runnable at its commit, and the clock starts there. Measured
from the commit until every run is COMPLETED, FAILED or CANCELLED:

- ``wall_s`` (the commit to the last ``RunCompleted``) against ``ideal_s`` = runs x steps x call
  time / runs in flight, as ``wall_to_ideal`` (``sleep``: at least the last first step, its
  sleep and its other steps, ``agents_waits.ideal_s``; ``approval``: as if approved at once);
  ``first_claim_s`` and ``slots_filled_s`` (the commit to the first claim, and to the claim
  that filled the last slot);
- CPU (user + system from /proc) per run and per step of each process role: ``worker`` (all
  worker processes), ``relay``, ``postgres_backends`` (the client backends of the benchmark's
  database, by their process titles; the producer's and the benchmark's own connections are
  named apart, ``producer`` and ``bench``, and left out), ``postgres_other`` (checkpointer,
  WAL writer, autovacuum), ``redis``, ``timers`` and ``reviewer_backends`` (the reviewer's
  connections'); ``runtime`` = worker + relay + timers + postgres_backends; and the whole
  machine's busy time per step (other people's work included: ``machine_busy``);
- ``rss_kb_per_in_flight``: the workers' peak resident set (VmHWM, reset when the burst starts,
  and the largest VmRSS sampled) less their idle one (after the warm-up and settle), divided
  by the runs in flight;
- the step overhead from the journal (``agents_stats.step_overheads``; ``ModelCalled``'s
  ``started_at`` and ``duration_ms``, the worker's clock): from one step's model answer to the
  next step's model call, p50/p99, with its parts outside and inside the gateway (the pair on
  either side of a wait apart: ``across_wait``); and the
  time from a run's claim to its first call (to the handler's start, which the handler
  returns as its result, and on: for a run that waited, from its last attempt's claim to its
  start and on to that attempt's first call), and from its last answer to its completion;
- Postgres committed transactions per step (``pg_stat_database`` of the benchmark database,
  read ``--settle`` s after the burst; ``net`` less the idle rate measured over the next
  ``--settle`` s);
- errors: runs not COMPLETED, runs executed more than once (claimed more often than the
  agent's attempts, one or two with a wait; more model calls than steps; a step journaled
  twice), model calls that failed; then, with the processes
  stopped, ``awooop replay run_state --verify`` (``replay_clean``);
- the waits (``sleep``, ``approval``; ``agents_waits.wait_figures``, from the journal): the
  time from a wait's end (``TimerFired``, ``ApprovalGranted``) to the run's next claim
  (``wake_to_resume``, ``approve_to_resume``), the most runs waiting at once
  (``asleep_max``, ``awaiting_approval_max``) and the slots they could have held
  (``slots_held_while_asleep``: the fewest slots the attempts left free, at most the runs
  waiting then, at any moment runs waited; ``agents_waits.occupancy``), and runs whose wait
  ended or resumed more than once (``fired_twice``, ``approved_twice``, ``resumed_twice``);
  the reviewer's lists, decisions and refusals.

``--profile`` attaches ``py-spy record --nonblocking`` (if installed: ``pip install py-spy``)
to each worker for the burst and splits the worker's CPU per step by where it went
(``agents_profile.profile_split``). The runtime has no profiling hook of its own (no cProfile
switch in its environment), so without py-spy the profile is skipped with a note. The other
figures of a profiled run carry py-spy's sampling cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import agents_stats as stats  # noqa: E402 - after the sys.path line, for a plain script
import agents_waits as waits  # noqa: E402
from agents_measure import finish, measure_shape  # noqa: E402
from cost import PG_OPTIONS, Servers  # noqa: E402
from scratch import report  # noqa: E402


async def run_all(
    args: argparse.Namespace, shapes: dict[str, stats.Shape], agent: waits.Agent
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "agents",
        "command": " ".join(["ops/bench/agents.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {
            "shapes": {name: s.__dict__ for name, s in shapes.items()},
            **{k: getattr(args, k) for k in ("warmup", "settle", "batch", "profile", "api")},
            "agent": agent.name,
            **({"sleep_s": agent.wait_s} if agent.timers else {}),
            "postgres_options": PG_OPTIONS,
        },
        "shapes": {},
    }
    with tempfile.TemporaryDirectory(prefix="awooop-agents-") as scratch:
        logs = Path(args.keep_logs) if args.keep_logs else Path(scratch)
        servers = Servers(Path(scratch) / "servers")
        servers.start()
        try:
            for name, shape in shapes.items():
                done = finish(await measure_shape(servers, shape, agent, args, logs), shape)
                result["shapes"][name] = done
                print(f"shape {name}: {json.dumps(done['summary'])}", file=sys.stderr, flush=True)
        finally:
            servers.stop()
    result["machine"]["load_avg_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default=None, help="a, b or all (default: all)")
    parser.add_argument("--runs", type=int, default=None, help="runs submitted")
    parser.add_argument("--concurrency", type=int, default=None, help="runs in flight in all")
    parser.add_argument("--steps", type=int, default=None, help="journaled steps per run")
    parser.add_argument("--call-s", type=float, default=None, help="seconds per model call")
    parser.add_argument("--workers", type=int, default=None, help="worker processes")
    parser.add_argument(
        "--jitter-s",
        type=float,
        default=None,
        help="each model call also waits up to this long, set by its prompt (default 0)",
    )
    parser.add_argument(
        "--api",
        choices=sorted(waits.API_HANDLERS),
        default="llm_step",
        help="how a step is written",
    )
    parser.add_argument(
        "--agent", choices=waits.AGENTS, default="llm", help="what each run does between steps"
    )
    parser.add_argument(
        "--sleep-s", type=float, default=2.0, help="--agent sleep: the sleep after the 1st step"
    )
    parser.add_argument("--warmup", type=int, default=50, help="one-step runs first")
    parser.add_argument(
        "--settle", type=float, default=10.5, help="seconds for Postgres's counters (10 s)"
    )
    parser.add_argument("--batch", type=int, default=500, help="runs per submit_many call")
    parser.add_argument("--profile", action="store_true", help="py-spy the workers' burst")
    parser.add_argument("--profile-rate", type=int, default=200, help="py-spy samples/s")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--keep-logs", default=None, help="a folder for the processes' logs")
    args = parser.parse_args()
    try:
        shapes = stats.plan(args.shape, vars(args))
        agent = waits.agent_of(args.agent, args.api, args.sleep_s)
    except ValueError as exc:
        parser.error(str(exc))
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run_all(args, shapes, agent))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "agents")


if __name__ == "__main__":
    main()
