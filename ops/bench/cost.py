"""Cost per run with one sequential producer: runs/s, CPU per run per process, Postgres
transactions and statements per run, and the first hop's latency broken down per hop.

    .venv/bin/python ops/bench/cost.py [--runs 5000] [--modes own,caller] [--rate 100]
                                       [--seconds 10] [--concurrency 10] [--settle 10.5]
                                       [--parts throughput,paced,alone]
                                       [--code DIR ...] [--rounds 1] [--out FILE]

Prints one JSON document (a short summary goes to stderr). Every process is real and started
from the checkout under test: one ``awooop relay``, one ``awooop worker --concurrency 10``
with a no-op handler, and ONE producer client (``cost_producer.py``) that submits one run per
call, sequentially, in two modes: ``own`` (``producer.submit(db, ...)``, the library's own
transaction) and ``caller`` (BEGIN, ``set_tenant``, ``submit(conn, ...)``, COMMIT).

The benchmark starts its own PostgreSQL (fsync on, ``pg_stat_statements`` with planning,
``track_commit_timestamp``) and Redis on loopback ports, so that every process of theirs is
the benchmark's: on a shared machine the split per process would otherwise count other
people's connections. Each measurement gets a fresh database (migrated by the checkout
under test) and key prefix.

- ``throughput`` (per mode): ``--runs`` runs as fast as the one client goes; runs/s from the
  first submit to the last COMPLETED; CPU per run (user + system from /proc) of each process:
  Postgres client backends, Postgres's other processes (postmaster, WAL writer, checkpointer,
  autovacuum), the worker, the relay, the producer and Redis (``stack_cpu_ms_per_run`` is
  their sum), and the whole machine's busy time per run (other people's work included: a
  figure from a busy machine says so in ``machine_busy``). Postgres: committed transactions
  per run (``pg_stat_database``, read ``--settle`` seconds after the last run, once the
  backends flushed their counters; the stack's idle rate, measured over the next ``--settle``
  seconds, is given apart and subtracted in ``xact_commit_per_run_net``), and statements
  per run (``pg_stat_statements``), the heaviest with their calls per run and mean
  execution and planning time.
- ``paced`` (per mode): ``--rate`` runs per second for ``--seconds`` (after one second of
  warm-up counted apart): submit-to-handler p50/p99 (the handler's start minus the time the
  submit, or the caller's COMMIT, returned; as ``worker.py``'s latency), CPU per run at that
  pace, and the first hop broken down (``cost_measure.HOPS``): ``relay`` (the producer's
  COMMIT, by Postgres's commit timestamp, to the XADD, by the entry id's millisecond + 0.5:
  +-0.5 ms), ``xadd_to_xreadgroup`` (to the arrival at a plain XREAD reader, which Redis
  answers with the worker's XREADGROUP), ``worker_to_claim`` (to the start of the claim's
  transaction: the RunClaimed event's time), ``claim_commit`` (to the claim's commit
  timestamp) and ``handler_start``; each hop's p50, p99, mean and share of the mean total.
- ``alone`` (per mode, not in the default ``--parts``): the same producer and ``--runs`` runs
  with no relay and no worker: submits/s and CPU per submit of the producer and of Postgres.
  The pipeline's runs/s cannot exceed this (each run is one of these submits first).

A/B: ``--code DIR`` (repeatable) runs the relay, the worker, the producer and the migrations
from another checkout, e.g. an older commit's ``git worktree add /tmp/old COMMIT`` (with its
own ``make install``, or without: then this interpreter with that checkout first on
``PYTHONPATH``); ``--code . --code /tmp/old --rounds 4`` interleaves them (A B, B A,
...) on the same servers, and ``summary`` gives each code's medians over the rounds and
their ratios to the first code's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import cost_measure as measure  # noqa: E402 - after the sys.path line, for a plain script
from worker import HANDLERS, Processes, process_env, python_of  # noqa: E402

from awooop.demo.servers import PostgresServer, RedisServer  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PG_OPTIONS = (
    "-c fsync=on -c shared_preload_libraries=pg_stat_statements "
    "-c pg_stat_statements.track_planning=on -c track_commit_timestamp=on"
)
MARK = "/* cost-bench */"  # the benchmark's own statements, left out of the counts


class Servers:
    """The benchmark's own PostgreSQL and Redis, for the whole invocation."""

    def __init__(self, directory: Path) -> None:
        self.postgres = PostgresServer(directory / "postgres", options=PG_OPTIONS)
        self.redis = RedisServer(directory / "redis")

    def start(self) -> None:
        self.postgres.start()
        self.redis.start()

    def stop(self) -> None:
        self.redis.stop()
        if self.postgres.running():
            self.postgres.stop()
        shutil.rmtree(self.postgres.dir, ignore_errors=True)  # a folder of its own as root

    def postmaster(self) -> int:
        return int((self.postgres.data / "postmaster.pid").read_text().split()[0])

    def url(self, database: str) -> str:
        return self.postgres.url.rsplit("/", 1)[0] + "/" + database


class Stack:
    """One measurement's scratch database and key prefix on the servers, migrated by the code
    under test, with its relay and worker running, and the benchmark's own connection."""

    def __init__(
        self,
        servers: Servers,
        code: Path,
        handler: str,
        concurrency: int,
        logs: Path,
        pipeline: bool = True,
    ) -> None:
        self.servers = servers
        self.code = code
        self.name = f"cost_{uuid.uuid4().hex[:10]}"
        self.url = servers.url(self.name)
        self.env = process_env(self.url, servers.redis.url, f"cost{uuid.uuid4().hex[:8]}", code)
        self.handler = handler
        self.concurrency = concurrency
        self.pipeline = pipeline  # False: no relay and no worker (the producer alone)
        self.procs = Processes(logs, code)
        self.pids: dict[int, str] = {}
        self.conn: asyncpg.Connection | None = None
        self.own_xacts = 0  # the benchmark's own transactions on the scratch database

    async def __aenter__(self) -> Stack:
        migrate = [python_of(self.code), "-m", "awooop.cli", "migrate"]
        result = await asyncio.to_thread(
            subprocess.run, migrate, cwd=self.code, env=self.env, capture_output=True, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"migrate failed: {result.stderr.decode()[-2000:]}")
        self.conn = await asyncpg.connect(self.url)
        await self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.pids[await self.conn.fetchval("SELECT pg_backend_pid()")] = "bench"
        assert self.servers.redis.process is not None
        self.pids[self.servers.redis.process.pid] = "redis"
        if not self.pipeline:
            return self
        relay = self.procs.start("relay", ["relay"], self.env)
        args = ["worker", "--handler", f"{HANDLERS}:{self.handler}"]
        args += ["--concurrency", str(self.concurrency)]
        worker = self.procs.start("worker", args, self.env)
        self.pids.update({relay.pid: "relay", worker.pid: "worker"})
        self.procs.wait_started("worker")
        await asyncio.sleep(0.5)  # the relay and the consumer group settle (as worker.py)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.procs.stop_all()
        if self.conn is not None:
            await self.conn.close()
        admin = await asyncpg.connect(self.servers.url("postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await admin.close()

    async def own(self, query: str, *args: object) -> Any:
        assert self.conn is not None
        self.own_xacts += 1
        return await self.conn.fetchval(f"{MARK} {query}", *args)

    async def wait_completed(self, count: int, within_s: float = 300) -> int:
        deadline = time.monotonic() + within_s
        query = "SELECT count(*) FROM awooop_run_state WHERE status = 'COMPLETED'"
        seen: int = await self.own(query)
        while seen < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            seen = await self.own(query)
        if seen < count:
            raise RuntimeError(f"{seen} of {count} runs completed in {within_s} s")
        return seen

    async def xacts(self) -> tuple[int, int]:
        """(committed, rolled back) transactions of the scratch database, less the benchmark's
        own (its connection flushes its counters first; the others' flush within 10 s)."""
        assert self.conn is not None
        await self.own("SELECT pg_stat_force_next_flush()::text")
        row = await self.conn.fetchrow(
            "/* cost-bench */ SELECT xact_commit, xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        self.own_xacts += 1
        assert row is not None
        return row["xact_commit"] - self.own_xacts, row["xact_rollback"]

    async def statements(self, runs: int) -> dict[str, Any]:
        assert self.conn is not None
        rows = await self.conn.fetch(
            "/* cost-bench */ SELECT query, calls, total_exec_time, total_plan_time, plans "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = current_database() AND s.query NOT LIKE $1 "
            "ORDER BY total_exec_time + total_plan_time DESC",
            f"%{MARK}%",
        )
        self.own_xacts += 1
        calls = sum(r["calls"] for r in rows)
        return {
            "per_run": round(calls / runs, 2),
            "exec_ms_per_run": round(sum(r["total_exec_time"] for r in rows) / runs, 3),
            "plan_ms_per_run": round(sum(r["total_plan_time"] for r in rows) / runs, 3),
            "heaviest": [
                {
                    "calls_per_run": round(r["calls"] / runs, 3),
                    "mean_exec_ms": round(r["total_exec_time"] / r["calls"], 3),
                    "mean_plan_ms": round(r["total_plan_time"] / max(1, r["plans"]), 3),
                    "query": " ".join(r["query"].split())[:160],
                }
                for r in rows[:12]
                if r["calls"]
            ],
            "most_called": [
                {
                    "calls_per_run": round(r["calls"] / runs, 3),
                    "query": " ".join(r["query"].split())[:100],
                }
                for r in sorted(rows, key=lambda r: -r["calls"])[:8]
            ],
        }

    async def producer(self, mode: str, runs: int, warmup: int, rate: float, out: Path) -> Client:
        return await Client.start(
            self,
            "producer",
            ["produce", mode, str(runs), str(warmup), str(rate), str(out)],
        )


class Client:
    """A ``cost_producer.py`` process of the code under test, spoken to by lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(
        cls, stack: Stack, role: str | None, args: list[str], script: Path | None = None
    ) -> Client:
        """``role``: its name in the CPU split (None: not counted, as the observer);
        ``script``: another client than the code under test's ``cost_producer.py``."""
        proc = await asyncio.create_subprocess_exec(
            python_of(stack.code),
            # The code under test's own client: its imports follow that checkout's layout.
            str(script or Path(stack.code) / "ops" / "bench" / "cost_producer.py"),
            *args,
            cwd=stack.code,
            env=stack.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        if role is not None:
            stack.pids[proc.pid] = role
        client = cls(proc)
        await client.expect("ready")
        return client

    async def expect(self, word: str, within_s: float = 600) -> None:
        assert self.proc.stdout is not None
        got = await asyncio.wait_for(self.proc.stdout.readline(), within_s)
        if got.decode().strip() != word:
            raise RuntimeError(f"expected {word!r} from a client, got {got!r}")

    def say(self, line: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    async def finish(self, within_s: float = 60) -> None:
        if self.proc.returncode is None:
            self.say()
            await asyncio.wait_for(self.proc.wait(), within_s)


class Window:
    """CPU per process role and of the whole machine between ``start`` and ``stop``."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    def start(self) -> None:
        self.began = time.time()
        self.before = measure.snapshot()
        self.machine_before = measure.machine_ticks()

    def stop(self) -> None:
        self.ended = time.time()
        self.after = measure.snapshot()
        self.machine_after = measure.machine_ticks()

    def per_run(self, runs: int) -> dict[str, Any]:
        procs = {**self.before, **self.after}
        roles = measure.roles_of(procs, self.stack.pids, self.stack.servers.postmaster())
        split = measure.cpu_by_role(self.before, self.after, roles, TICK)
        ms = {role: round(s * 1000 / runs, 3) for role, s in sorted(split.seconds.items())}
        stack = sum(v for role, v in ms.items() if role != "bench")
        total = self.machine_after[0] - self.machine_before[0]
        idle = self.machine_after[1] - self.machine_before[1]
        return {
            "stack_cpu_ms_per_run": round(stack, 3),
            "cpu_ms_per_run": ms,
            "machine_cpu_ms_per_run": round((total - idle) / TICK * 1000 / runs, 3),
            "machine_busy": round(1 - idle / max(1, total), 2),
            "exited_processes": split.exited,
        }


async def throughput(
    servers: Servers, code: Path, mode: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    warmup = 50
    async with Stack(servers, code, "noop", args.concurrency, tmp) as stack:
        client = await stack.producer(mode, args.runs, warmup, 0, tmp / "produced.json")
        try:
            await stack.wait_completed(warmup)
            await asyncio.sleep(args.settle)  # the backends' counters flushed
            xact0 = await stack.xacts()
            await stack.own("SELECT pg_stat_statements_reset()::text")
            window = Window(stack)
            window.start()
            client.say()
            await client.expect("done")
            await stack.wait_completed(warmup + args.runs)
            window.stop()
            statements = await stack.statements(args.runs)
            await asyncio.sleep(args.settle)
            xact1, settled = await stack.xacts(), time.time()
            await asyncio.sleep(args.settle)
            xact2, idled = await stack.xacts(), time.time()
        finally:
            await client.finish()
    seconds = window.ended - window.began
    idle_per_s = (xact2[0] - xact1[0]) / max(1e-9, idled - settled)
    committed = xact1[0] - xact0[0]
    return {
        "mode": mode,
        "runs": args.runs,
        "seconds": round(seconds, 3),
        "runs_per_s": round(args.runs / seconds, 1),
        **window.per_run(args.runs),
        "postgres": {
            "xact_commit_per_run": round(committed / args.runs, 2),
            "xact_rollback_per_run": round((xact1[1] - xact0[1]) / args.runs, 3),
            "idle_xact_commit_per_s": round(idle_per_s, 2),
            "xact_commit_per_run_net": round(
                (committed - idle_per_s * (settled - window.ended)) / args.runs, 2
            ),
            "statements": statements,
        },
    }


async def alone(
    servers: Servers, code: Path, mode: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    warmup = 50
    async with Stack(servers, code, "noop", args.concurrency, tmp, pipeline=False) as stack:
        client = await stack.producer(mode, args.runs, warmup, 0, tmp / "produced.json")
        try:
            window = Window(stack)
            window.start()
            client.say()
            await client.expect("done")
            window.stop()
        finally:
            await client.finish()
    seconds = window.ended - window.began
    return {
        "mode": mode,
        "runs": args.runs,
        "seconds": round(seconds, 3),
        "submits_per_s": round(args.runs / seconds, 1),
        **window.per_run(args.runs),
    }


FIRST_HOP = """/* cost-bench */
SELECT r.run_id::text AS run_id, r.result::text::float8 AS handler_started,
       extract(epoch FROM (c.data->>'at')::timestamptz)::float8 AS claim_started,
       extract(epoch FROM pg_xact_commit_timestamp(c.xmin))::float8 AS claim_committed,
       extract(epoch FROM pg_xact_commit_timestamp(e.xmin))::float8 AS committed
FROM awooop_run_state r
JOIN awooop_events c ON c.stream_id = 'run-' || r.run_id AND c.event_type = 'RunClaimed'
JOIN awooop_events e ON e.stream_id = 'run-' || r.run_id AND e.event_type = 'RunCreated'
WHERE r.status = 'COMPLETED'
"""


async def paced(
    servers: Servers, code: Path, mode: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    warmup, runs = int(args.rate), int(args.rate * args.seconds)
    async with Stack(servers, code, "stamp", args.concurrency, tmp) as stack:
        observer = await Client.start(
            stack, None, ["observe", str(warmup + runs), "600", str(tmp / "observed.json")]
        )
        client = await stack.producer(mode, runs, warmup, args.rate, tmp / "produced.json")
        try:
            await stack.wait_completed(warmup)
            window = Window(stack)
            window.start()
            client.say()
            await client.expect("done")
            await stack.wait_completed(warmup + runs)
            window.stop()
            assert stack.conn is not None
            rows = await stack.conn.fetch(FIRST_HOP)
        finally:
            await client.finish()
        await asyncio.wait_for(observer.proc.wait(), 60)
    returned = dict(json.loads((tmp / "produced.json").read_text())["runs"])
    observed = json.loads((tmp / "observed.json").read_text())
    points: list[dict[str, float | None]] = []
    latency: list[float] = []
    for row in rows:
        if row["run_id"] not in returned:
            continue  # a warm-up run
        latency.append((row["handler_started"] - returned[row["run_id"]]) * 1000)
        entry_ms, delivered = observed.get(row["run_id"], (None, None))
        xadd = None if entry_ms is None else min(entry_ms / 1000 + 0.0005, delivered)
        points.append({**dict(row), "xadd": xadd, "delivered": delivered})
    return {
        "mode": mode,
        "rate_per_s": args.rate,
        "runs": runs,
        "completed": len(latency),
        "submit_to_handler_ms": {
            "p50": round(measure.percentile(latency, 0.5), 2),
            "p99": round(measure.percentile(latency, 0.99), 2),
            "max": round(max(latency), 2) if latency else None,
        },
        "first_hop": measure.hop_breakdown(points),
        **window.per_run(runs),
    }


def describe(code: Path) -> dict[str, Any]:
    def git(*cmd: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(code), *cmd], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    return {
        "dir": str(code),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def _throughput_line(args: argparse.Namespace, r: dict[str, Any]) -> str:
    return (
        f"{r['runs_per_s']} runs/s, {r['stack_cpu_ms_per_run']} ms CPU/run "
        f"{r['cpu_ms_per_run']}, {r['postgres']['xact_commit_per_run']} xact/run"
    )


def _paced_line(args: argparse.Namespace, r: dict[str, Any]) -> str:
    return f"at {args.rate}/s: {r['submit_to_handler_ms']}, hops {r['first_hop'].get('hops')}"


def _alone_line(args: argparse.Namespace, r: dict[str, Any]) -> str:
    return f"alone: {r['submits_per_s']} submits/s, {r['cpu_ms_per_run']} ms CPU/submit"


PARTS = {  # part: how it is measured, and its summary line on stderr
    "throughput": (throughput, _throughput_line),
    "paced": (paced, _paced_line),
    "alone": (alone, _alone_line),
}


async def one_code(
    servers: Servers, code: Path, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    out: dict[str, Any] = {part: {} for part in PARTS}
    parts = args.parts.split(",")
    for part, (measure_part, line) in PARTS.items():
        for mode in args.modes.split(",") if part in parts else []:
            result = await measure_part(servers, code, mode, args, tmp)
            out[part][mode] = result
            print(f"{code} {mode} {line(args, result)}", file=sys.stderr, flush=True)
    return out


SUMMARY = {  # figure: its path in one code's results of one round, after the mode
    "runs_per_s": ("throughput", "runs_per_s"),
    "stack_cpu_ms_per_run": ("throughput", "stack_cpu_ms_per_run"),
    "xact_commit_per_run": ("throughput", "postgres", "xact_commit_per_run"),
    "paced_p50_ms": ("paced", "submit_to_handler_ms", "p50"),
    "paced_p99_ms": ("paced", "submit_to_handler_ms", "p99"),
    "paced_stack_cpu_ms_per_run": ("paced", "stack_cpu_ms_per_run"),
    "alone_submits_per_s": ("alone", "submits_per_s"),
    "alone_stack_cpu_ms_per_run": ("alone", "stack_cpu_ms_per_run"),
}


def pick(result: dict[str, Any], mode: str, path: tuple[str, ...]) -> float | None:
    value: Any = result.get(path[0], {}).get(mode)
    for key in path[1:]:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) else None


def summary(labels: list[str], rounds: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    """Each code's medians over the rounds; with several codes, each one's ratio to the
    first code's median (a ratio within one invocation, where the machine is the same)."""
    figures: dict[str, dict[str, float]] = {}
    for label in labels:
        figures[label] = {}
        for mode in modes:
            for name, path in SUMMARY.items():
                values = [pick(r["results"][label], mode, path) for r in rounds]
                present = [v for v in values if v is not None]
                if present:
                    figures[label][f"{mode}.{name}"] = round(statistics.median(present), 3)
    out: dict[str, Any] = {"medians": figures}
    if len(labels) > 1:
        base = figures[labels[0]]
        out["ratio_to_first"] = {
            label: {k: round(v / base[k], 3) for k, v in f.items() if base.get(k)}
            for label, f in figures.items()
        }
    return out


async def run_all(args: argparse.Namespace, codes: list[Path], logs: Path | None) -> dict[str, Any]:
    labels = [f"{c} @{describe(c)['commit']}" for c in codes]
    if len(set(labels)) < len(labels):
        raise SystemExit("each --code must be a different checkout")
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {
            k: getattr(args, k)
            for k in ("runs", "modes", "parts", "rate", "seconds", "concurrency", "settle")
        },
        "rounds_asked": args.rounds,
        "postgres_options": PG_OPTIONS,
        "codes": {label: describe(c) for label, c in zip(labels, codes, strict=True)},
        "rounds": [],
    }
    with tempfile.TemporaryDirectory(prefix="awooop-cost-") as scratch:
        servers = Servers(Path(scratch) / "servers")
        logs = logs or Path(scratch)
        servers.start()
        try:
            for n in range(args.rounds):
                order = list(zip(labels, codes, strict=True))
                if n % 2:
                    order.reverse()  # A B, B A, ...: a drift of the machine hits both alike
                results = {}
                for label, code in order:
                    results[label] = await one_code(servers, code, args, logs)
                report["rounds"].append({"order": [lb for lb, _ in order], "results": results})
        finally:
            servers.stop()
    report["summary"] = summary(labels, report["rounds"], args.modes.split(","))
    report["machine"]["load_avg_after"] = os.getloadavg()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000, help="runs per throughput measure")
    parser.add_argument("--modes", default="own,caller", help="own and/or caller")
    parser.add_argument(
        "--parts", default="throughput,paced", help="throughput, paced and/or alone"
    )
    parser.add_argument("--rate", type=float, default=100.0, help="paced runs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="paced seconds")
    parser.add_argument("--concurrency", type=int, default=10, help="the worker's --concurrency")
    parser.add_argument(
        "--settle",
        type=float,
        default=10.5,
        help="seconds for idle backends to flush their counters (Postgres: within 10 s)",
    )
    parser.add_argument(
        "--code",
        action="append",
        help="a checkout to measure (repeat for an A/B; default this one)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds over every --code")
    parser.add_argument("--out", default=None)
    parser.add_argument("--keep-logs", default=None, help="a folder for the processes' logs")
    args = parser.parse_args()
    codes = [Path(c).resolve() for c in (args.code or [str(ROOT)])]
    logs = Path(args.keep_logs) if args.keep_logs else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asyncio.run(run_all(args, codes, logs)), indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
