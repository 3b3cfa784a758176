"""Fair share between projects against a baseline revision in one run: a small project's start
latency behind a large project's backlog, and the cost of the fair order to a project alone.

    .venv/bin/python ops/bench/fairness.py [--runs-a 10000] [--runs-b 100] [--concurrency 10]
                                           [--rounds 3] [--baseline REF] [--out FILE]
                                           [--keep-logs DIR]

Prints one JSON document and keeps it in ``ops/bench/results/fairness-<time>.json``. The
setting is ``scheduler.py``'s, whose helpers it uses: the benchmark's own PostgreSQL and Redis
(``cost.Servers``), per measurement a fresh database migrated by the side's ``awooop migrate``
and a fresh key prefix, one ``awooop relay``, one ``awooop worker --concurrency 10`` with a
no-op handler, and one producer process (``scheduler_producer.py``, the producer library's
``submit_many`` in batches of 500). Two projects, A and B, chosen in the same shard stream
(``awooop.streams.keys.shard_of`` with the processes' shard count; in two shards each stream is read
in turn, so arrival order would already interleave them); 50 warm-up runs of A first.

- ``contended``: A submits ``--runs-a`` runs, then (once they are committed) B submits
  ``--runs-b``: each project's start latency (each run's RunClaimed ``recorded_at`` minus its
  RunCreated ``recorded_at``) p50, p99 and max, how many runs were waiting when B submitted,
  and runs/s and wall time from A's first submit to the last run COMPLETED. Target: B's p99
  under 2 s with fair share.
- ``alone``: A alone submits ``--runs-a`` runs: runs/s and CPU per run (user + system from
  /proc) of the worker, the relay and the Postgres client backends (``scheduler_cpu_ms_per_run``
  their sum; the whole split is in ``cpu``). Target: ``new`` within 10 % of ``old`` in runs/s.

A/B as ``scheduler.py``: ``new`` is this checkout (with ``AWOOOP_FAIR_SHARE`` at its default,
on), ``old`` a temporary ``git worktree`` of ``--baseline`` (default: the merge-base of HEAD and
``main``, which takes runs in arrival order), run on this interpreter with its tree first on
``PYTHONPATH``; ``revisions`` records each side's commit and where it imported ``awooop`` and
``streams`` from. Each round measures ``contended`` then ``alone``, each with both sides next to
each other, ``new`` first in even rounds and ``old`` first in odd ones. ``summary``: each side's
median per measurement over the rounds and the ratio new/old; ``targets``: the two targets.
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

import scheduler_stats as stats  # noqa: E402 - after the sys.path line, for a plain script
from cost import PG_OPTIONS, Client, Servers, Stack, Window  # noqa: E402
from fairness_stats import (  # noqa: E402
    FIGURES,
    MEASURES,
    WAITING,
    same_shard_pair,
    start_figures,
    targets,
)
from scheduler import (  # noqa: E402
    BATCH,
    WARMUP,
    Baseline,
    claim_ms_by_project,
    cpu_figures,
    default_baseline,
    revisions,
)
from scratch import report  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.streams.keys import shard_of  # noqa: E402


async def measure(
    servers: Servers,
    code: Path,
    projects: tuple[str, str],
    runs_b: int,
    args: argparse.Namespace,
    logs: Path,
) -> dict[str, Any]:
    """A's ``--runs-a`` runs, then ``runs_b`` of B (0: A alone), on a fresh stack."""
    a, b = projects
    runs = args.runs_a + runs_b
    waiting = None
    async with Stack(servers, code, "noop", args.concurrency, logs) as stack:
        producer = await Client.start(stack, "producer", ["0"], HERE / "scheduler_producer.py")
        try:
            producer.say(f"burst {WARMUP} {WARMUP} {a}")
            await producer.expect("done")
            await stack.wait_completed(WARMUP)
            mark = await stack.own("SELECT coalesce(max(position), 0) FROM awooop_events")
            window = Window(stack)
            window.start()
            producer.say(f"burst {args.runs_a} {BATCH} {a}")
            await producer.expect("done")
            if runs_b:
                waiting = await stack.own(WAITING)
                producer.say(f"burst {runs_b} {BATCH} {b}")
                await producer.expect("done")
            await stack.wait_completed(WARMUP + runs, within_s=1800)
            window.stop()
            by_project = await claim_ms_by_project(stack, mark)
        finally:
            await producer.finish()
    seconds = window.ended - window.began
    cpu = window.per_run(runs)
    return {
        "runs_a": args.runs_a,
        "runs_b": runs_b,
        "runs_per_s": round(runs / seconds, 1),
        "seconds": round(seconds, 3),
        "waiting_at_b_submit": waiting,
        **start_figures("b", stats.latency(by_project.get(b, []))),
        **start_figures("a", stats.latency(by_project.get(a, []))),
        **cpu_figures(cpu),
        "cpu": cpu,
    }


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    ref = args.baseline or default_baseline()
    result: dict[str, Any] = {
        "benchmark": "fairness",
        "command": " ".join(["ops/bench/fairness.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {
            **{k: getattr(args, k) for k in ("runs_a", "runs_b", "concurrency", "rounds")},
            "warmup_runs": WARMUP,
            "batch": BATCH,
            "postgres_options": PG_OPTIONS,
        },
    }
    with tempfile.TemporaryDirectory(prefix="awooop-fairbench-") as scratch, Baseline(ref) as old:
        logs = Path(args.keep_logs) if args.keep_logs else Path(scratch)
        servers = Servers(Path(scratch) / "servers")
        codes = {"new": ROOT, "old": old.dir}
        servers.start()
        try:
            settings = load_settings(environ=Stack(servers, ROOT, "noop", 1, logs).env)
            projects = same_shard_pair(settings.shard_count)
            result["projects"] = {
                "a": projects[0],
                "b": projects[1],
                "shard_count": settings.shard_count,
                "shard": shard_of(projects[0], settings.shard_count),
                "same_shard": True,
                "new_fair_share": settings.fair_share,
            }
            result["revisions"] = revisions(servers, codes, ref, logs)
            measurements: list[dict[str, Any]] = []
            for n, what, side in stats.schedule(args.rounds, MEASURES):
                runs_b = args.runs_b if what == "contended" else 0
                done = await measure(servers, codes[side], projects, runs_b, args, logs)
                measurements.append({"round": n, "measure": what, "side": side, **done})
                b_ms = [done[f"b_start_{q}_ms"] for q in ("p50", "p99", "max")]
                print(
                    f"round {n} {what} {side}: {done['runs_per_s']} runs/s, "
                    f"{done['scheduler_cpu_ms_per_run']} ms CPU/run, B start p50/p99/max "
                    f"{'/'.join(map(str, b_ms))} ms",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            servers.stop()
    result["summary"] = stats.summarize(measurements, MEASURES, figures=FIGURES, by="measure")
    result["targets"] = targets(result["summary"])
    result["measurements"] = measurements
    result["machine"]["load_avg_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-a", type=int, default=10_000, help="project A's runs")
    parser.add_argument("--runs-b", type=int, default=100, help="project B's runs (contended)")
    parser.add_argument("--concurrency", type=int, default=10, help="the worker's --concurrency")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over both measures and sides")
    parser.add_argument("--baseline", default=None, help="git ref (default: merge-base with main)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--keep-logs", default=None, help="a folder for the processes' logs")
    args = parser.parse_args()
    if args.runs_a < 1 or args.runs_b < 1 or args.rounds < 1:
        parser.error("--runs-a, --runs-b and --rounds are at least 1")
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run_all(args))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "fairness")


if __name__ == "__main__":
    main()
