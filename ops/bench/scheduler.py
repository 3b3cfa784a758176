"""The scheduler's cost with concurrency keys in play, against a baseline revision in one run.

    .venv/bin/python ops/bench/scheduler.py [--shapes 0,1,100,10000] [--runs 5000]
                                            [--rate 100] [--seconds 10] [--concurrency 10]
                                            [--max 1000] [--rounds 3] [--baseline REF]
                                            [--out FILE] [--keep-logs DIR]

Prints one JSON document and keeps it in ``ops/bench/results/scheduler-<time>.json``. Every
process is real, on the benchmark's own PostgreSQL and Redis (``cost.Servers``: every client
backend of that Postgres is the benchmark's): one ``awooop relay``, one ``awooop worker
--concurrency 10`` with a no-op handler, and one producer process (``scheduler_producer.py``)
that submits through the producer library's ``submit_many``. A shape is a number of distinct
keys: ``0`` declares no concurrency limit; N > 0 declares one on the contract (``awooop
projects limit bench --contract default --key input.customer_id --max 1000``, a maximum that
never throttles) and the runs' ``customer_id`` go round N values. Each measurement is a fresh
database migrated by its side's ``awooop migrate`` and a fresh key prefix:

- 50 warm-up runs; then ``--rate`` runs/s for ``--seconds`` (one run per ``submit_many``):
  the claim latency, p50 and p99 of each run's RunClaimed ``recorded_at`` minus its RunCreated
  ``recorded_at`` (the event log's timestamps: each writing transaction's start);
- ``--runs`` runs in ``submit_many`` batches of 500 as fast as the producer goes: runs/s from
  the first submit to the last COMPLETED, CPU per run (user + system from /proc) of the worker,
  the relay and the Postgres client backends (the relay's, the worker's and the producer's
  intake; ``scheduler_cpu_ms_per_run`` is the three's sum; the others are in ``cpu``), and
  the same claim latency (``burst_claim_*``: mostly the wait behind the backlog).

A/B: the sides are ``new`` (this checkout, uncommitted changes included: ``dirty``) and
``old``, a temporary ``git worktree`` of ``--baseline`` (default: the merge-base of HEAD and
``main``; ``--baseline HEAD`` measures the same code twice, where every ratio should be about
1), removed at the end; both revisions need concurrency limits (``awooop projects limit``)
for a shape other than 0. The old side runs on this interpreter with its worktree as the
working directory and first on ``PYTHONPATH`` (ahead of this checkout's editable install);
``revisions`` records each side's commit and the files its ``awooop`` and ``streams`` were
imported from, and the benchmark stops when a side's are not under its own tree. The no-op
handler (``worker_handlers.py``) and the producer script are this checkout's on both sides.
Measurements go round by round, shape by shape, ``new`` then ``old`` in even rounds and
``old`` then ``new`` in odd ones (A, B, then B, A: ``scheduler_stats.schedule``):
``summary`` has each side's median per shape over the rounds and the ratio new/old;
``claim_latency_vs_keys``, the paced claim latency of the fewest keys (1) against the most
(10,000) and their ratio (1.0: flat in the number of keys).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import scheduler_stats as stats  # noqa: E402 - after the sys.path line, for a plain script
from cost import PG_OPTIONS, Client, Servers, Stack, Window  # noqa: E402
from scratch import report  # noqa: E402
from worker import python_of  # noqa: E402

WARMUP = 50
BATCH = 500
# Each run's claim latency: its first RunClaimed after its RunCreated, by the log's timestamps.
CLAIM_MS = """/* cost-bench */
SELECT e.project_id, extract(epoch FROM c.at - e.recorded_at)::float8 * 1000 AS ms
FROM awooop_events e
CROSS JOIN LATERAL (
    SELECT min(recorded_at) AS at FROM awooop_events c
    WHERE c.stream_id = e.stream_id AND c.event_type = 'RunClaimed'
) c
WHERE e.event_type = 'RunCreated' AND e.position > $1
"""
# A baseline older than the streams package's move into awooop imports it as ``streams``.
WHERE_FROM = (
    "import importlib.util as u, json, awooop; "
    "s = u.find_spec('awooop.streams') or u.find_spec('streams'); "
    "print(json.dumps({'awooop': awooop.__file__, 'streams': s and s.origin}))"
)


def git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def default_baseline() -> str:
    """The merge-base of HEAD and ``main`` (HEAD itself on main)."""
    try:
        return git("merge-base", "HEAD", "main")
    except RuntimeError:
        return "HEAD"


class Baseline:
    """A temporary detached ``git worktree`` of ``ref``, removed on exit."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.parent = Path(tempfile.mkdtemp(prefix="awooop-schedbench-"))
        self.dir = self.parent / "baseline"

    def __enter__(self) -> Baseline:
        git("worktree", "add", "--detach", str(self.dir), self.ref)
        return self

    def __exit__(self, *_exc: object) -> None:
        try:
            git("worktree", "remove", "--force", str(self.dir))
        finally:
            shutil.rmtree(self.parent, ignore_errors=True)


def revision(code: Path, ref: str | None, env: dict[str, str]) -> dict[str, Any]:
    """The side's commit and where its processes import ``awooop`` and ``streams`` from (the
    interpreter, working directory and environment of its relay and worker)."""
    done = subprocess.run(
        [python_of(code), "-c", WHERE_FROM], cwd=code, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{code}: cannot import awooop: {done.stderr[-2000:]}")
    imported = json.loads(done.stdout)
    for name, path in imported.items():
        if not Path(path).resolve().is_relative_to(code.resolve()):
            raise RuntimeError(f"{code}: {name} is imported from {path}, not from the side's tree")
    return {
        "dir": str(code),
        "ref": ref,
        "commit": git("rev-parse", "HEAD", cwd=code),
        "subject": git("log", "-1", "--format=%s", cwd=code),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no", cwd=code)),
        "python": python_of(code),
        "imported_from": imported,
    }


async def declare_limit(stack: Stack, maximum: int) -> None:
    """The contract's limit, declared with the side's own ``awooop projects limit``."""
    argv = [python_of(stack.code), "-m", "awooop.cli", "projects", "limit", "bench"]
    argv += ["--contract", "default", "--key", "input.customer_id", "--max", str(maximum)]
    done = await asyncio.to_thread(
        subprocess.run, argv, cwd=stack.code, env=stack.env, capture_output=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"projects limit failed: {done.stderr.decode()[-2000:]}")


async def claim_ms(stack: Stack, after: int) -> list[float]:
    return [ms for mine in (await claim_ms_by_project(stack, after)).values() for ms in mine]


async def claim_ms_by_project(stack: Stack, after: int) -> dict[str, list[float]]:
    """The claim latency of each run created after the log position ``after``, per project."""
    assert stack.conn is not None
    out: dict[str, list[float]] = {}
    for row in await stack.conn.fetch(CLAIM_MS, after):
        out.setdefault(row["project_id"], []).append(row["ms"])
    return out


def cpu_figures(cpu: dict[str, Any]) -> dict[str, Any]:
    """From ``Window.per_run``: the CPU per run of the worker, the relay and the Postgres
    client backends, and their sum (``scheduler_cpu_ms_per_run``)."""
    split = cpu["cpu_ms_per_run"]
    mine = {role: split.get(role) for role in ("worker", "relay", "postgres_backends")}
    return {
        "scheduler_cpu_ms_per_run": round(sum(v or 0.0 for v in mine.values()), 3),
        **{f"{role}_cpu_ms_per_run": v for role, v in mine.items()},
    }


def revisions(servers: Servers, codes: dict[str, Path], ref: str, logs: Path) -> dict[str, Any]:
    """:func:`revision` of each side (``old``: the checkout of ``ref``), in the environment of
    its processes (an unstarted Stack's)."""
    return {
        side: revision(
            code, ref if side == "old" else None, Stack(servers, code, "noop", 1, logs).env
        )
        for side, code in codes.items()
    }


async def measure(
    servers: Servers, code: Path, keys: int, args: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    paced = int(args.rate * args.seconds)
    async with Stack(servers, code, "noop", args.concurrency, logs) as stack:
        if keys:
            await declare_limit(stack, args.max)
        producer = await Client.start(
            stack, "producer", [str(keys)], HERE / "scheduler_producer.py"
        )
        try:
            producer.say(f"burst {WARMUP} {WARMUP}")
            await producer.expect("done")
            await stack.wait_completed(WARMUP)
            mark = await stack.own("SELECT coalesce(max(position), 0) FROM awooop_events")
            producer.say(f"paced {paced} {args.rate}")
            await producer.expect("done")
            await stack.wait_completed(WARMUP + paced)
            paced_ms = await claim_ms(stack, mark)
            mark = await stack.own("SELECT coalesce(max(position), 0) FROM awooop_events")
            window = Window(stack)
            window.start()
            producer.say(f"burst {args.runs} {BATCH}")
            await producer.expect("done")
            await stack.wait_completed(WARMUP + paced + args.runs)
            window.stop()
            burst_ms = await claim_ms(stack, mark)
        finally:
            await producer.finish()
    seconds = window.ended - window.began
    cpu = window.per_run(args.runs)
    claim, burst = stats.latency(paced_ms), stats.latency(burst_ms)
    return {
        "keys": keys,
        "runs_per_s": round(args.runs / seconds, 1),
        "seconds": round(seconds, 3),
        **cpu_figures(cpu),
        "claim_p50_ms": claim["p50_ms"],
        "claim_p99_ms": claim["p99_ms"],
        "burst_claim_p50_ms": burst["p50_ms"],
        "burst_claim_p99_ms": burst["p99_ms"],
        "claim_latency": claim,
        "burst_claim_latency": burst,
        "cpu": cpu,
    }


async def run_all(args: argparse.Namespace, shapes: list[int]) -> dict[str, Any]:
    ref = args.baseline or default_baseline()
    result: dict[str, Any] = {
        "benchmark": "scheduler",
        "command": " ".join(["ops/bench/scheduler.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {
            "shapes": shapes,
            **{k: getattr(args, k) for k in ("runs", "rate", "seconds", "concurrency", "max")},
            "rounds": args.rounds,
            "warmup_runs": WARMUP,
            "burst_batch": BATCH,
            "postgres_options": PG_OPTIONS,
        },
    }
    with tempfile.TemporaryDirectory(prefix="awooop-schedbench-") as scratch, Baseline(ref) as old:
        logs = Path(args.keep_logs) if args.keep_logs else Path(scratch)
        servers = Servers(Path(scratch) / "servers")
        codes = {"new": ROOT, "old": old.dir}
        servers.start()
        try:
            result["revisions"] = revisions(servers, codes, ref, logs)
            measurements: list[dict[str, Any]] = []
            for n, keys, side in stats.schedule(args.rounds, shapes):
                done = await measure(servers, codes[side], keys, args, logs)
                measurements.append({"round": n, "side": side, **done})
                print(
                    f"round {n} keys {keys} {side}: {done['runs_per_s']} runs/s, "
                    f"{done['scheduler_cpu_ms_per_run']} ms CPU/run, claim p50/p99 "
                    f"{done['claim_p50_ms']}/{done['claim_p99_ms']} ms",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            servers.stop()
    result["summary"] = stats.summarize(measurements, shapes)
    result["claim_latency_vs_keys"] = stats.flatness(result["summary"]["medians"], shapes)
    result["measurements"] = measurements
    result["machine"]["load_avg_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="0,1,100,10000", help="distinct keys (0: no limit)")
    parser.add_argument("--runs", type=int, default=5000, help="runs per throughput measure")
    parser.add_argument("--rate", type=float, default=100.0, help="paced runs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="paced seconds")
    parser.add_argument("--concurrency", type=int, default=10, help="the worker's --concurrency")
    parser.add_argument("--max", type=int, default=1000, help="the limit's runs per key")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every shape and side")
    parser.add_argument("--baseline", default=None, help="git ref (default: merge-base with main)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--keep-logs", default=None, help="a folder for the processes' logs")
    args = parser.parse_args()
    shapes = stats.parse_shapes(args.shapes)
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run_all(args, shapes))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "scheduler")


if __name__ == "__main__":
    main()
