"""The load agents put on the runtime: many runs in flight, each mostly waiting on a model.

    .venv/bin/python ops/bench/agents.py [--shape a|b|all] [--runs N] [--concurrency N]
                                         [--steps N] [--call-s S] [--workers N]
                                         [--api llm_step|step]
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

Per shape, on a fresh database: ``--warmup`` runs of one step (connections, statements), then
``--settle`` seconds (Postgres flushes idle backends' counters within 10 s). Then ALL runs are
submitted with the producer library's ``submit_many`` (batches of ``--batch``) in ONE caller
transaction, so that they become runnable at its commit, and the clock starts there. Measured
from the commit until every run is COMPLETED, FAILED or CANCELLED:

- ``wall_s`` (the commit to the last ``RunCompleted``) against ``ideal_s`` = runs x steps x call
  time / runs in flight, as ``wall_to_ideal``; ``first_claim_s`` and ``slots_filled_s`` (the
  commit to the first claim, and to the claim that filled the last slot);
- CPU (user + system from /proc) per run and per step of each process role: ``worker`` (all
  worker processes), ``relay``, ``postgres_backends`` (the client backends of the benchmark's
  database, by their process titles; the producer's and the benchmark's own connections are
  named apart, ``producer`` and ``bench``, and left out), ``postgres_other`` (checkpointer,
  WAL writer, autovacuum), ``redis``; ``runtime`` = worker + relay + postgres_backends; and the
  whole machine's busy time per step (other people's work included: ``machine_busy``);
- ``rss_kb_per_in_flight``: the workers' peak resident set (VmHWM, reset when the burst starts,
  and the largest VmRSS sampled) less their idle one (after the warm-up and settle), divided
  by the runs in flight;
- the step overhead from the journal (``agents_stats.step_overheads``; ``ModelCalled``'s
  ``started_at`` and ``duration_ms``, the worker's clock): from one step's model answer to the
  next step's model call, p50/p99, with its parts outside and inside the gateway; and the
  time from a run's claim to its first call (to the handler's start, which the handler
  returns as its result, and on), and from its last answer to its completion;
- Postgres committed transactions per step (``pg_stat_database`` of the benchmark database,
  read ``--settle`` s after the burst; ``net`` less the idle rate measured over the next
  ``--settle`` s);
- errors: runs not COMPLETED, runs executed more than once (claimed twice, more model calls
  than steps, a step journaled twice), model calls that failed; then, with the processes
  stopped, ``awooop replay run_state --verify`` (``replay_clean``).

``--profile`` attaches ``py-spy record --nonblocking`` (if installed: ``pip install py-spy``)
to each worker for the burst and splits the worker's CPU per step by where it went
(``agents_stats.profile_split``). The runtime has no profiling hook of its own (no cProfile
switch in its environment), so without py-spy the profile is skipped with a note. The other
figures of a profiled run carry py-spy's sampling cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import agents_stats as stats  # noqa: E402 - after the sys.path line, for a plain script
import cost_measure as measure  # noqa: E402
from cost import PG_OPTIONS, Servers  # noqa: E402
from scratch import report  # noqa: E402
from worker import HANDLERS, Processes, process_env, python_of  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.pools import init_connection  # noqa: E402
from awooop.producer import ChannelEvent, set_tenant, submit_many  # noqa: E402

PROJECT = "bench"  # as worker.py
TICK = os.sysconf("SC_CLK_TCK")
MARK = "/* agents-bench */"  # the benchmark's own statements
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
API_HANDLERS = {"llm_step": "agent_llm_steps", "step": "agent_steps"}  # --api
JOURNAL = """/* agents-bench */
SELECT substr(stream_id, 5) AS run, event_type,
       extract(epoch FROM recorded_at)::float8 AS at,
       extract(epoch FROM (data->>'started_at')::timestamptz)::float8 AS started,
       (data->>'duration_ms')::float8 / 1000 AS duration_s,
       data->>'outcome' AS outcome, data->>'step' AS step
FROM awooop_events
WHERE position > $1 AND stream_id LIKE 'run-%'
  AND event_type IN ('RunClaimed', 'ModelCalled', 'StepCompleted', 'RunCompleted')
"""


def proc_status(pid: int, field: str) -> int | None:
    """A field of /proc/PID/status in kB (VmRSS, VmHWM), None when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (``clear_refs`` 5, Linux 4.0+)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class AgentStack:
    """One shape's scratch database and key prefix on the servers, its relay and worker
    processes, and the benchmark's own connection (its transactions counted, to be left out)."""

    def __init__(self, servers: Servers, shape: stats.Shape, logs: Path, api: str) -> None:
        self.servers = servers
        self.shape = shape
        self.handler = API_HANDLERS[api]
        self.name = f"agents_{uuid.uuid4().hex[:10]}"
        self.url = servers.url(self.name)
        llm = f"local:?delay_ms={shape.delay_ms}"
        self.env = process_env(
            self.url, servers.redis.url, f"agents{uuid.uuid4().hex[:8]}", ROOT, llm_url=llm
        )
        self.procs = Processes(logs, ROOT)
        self.pids: dict[int, str] = {}
        self.workers: list[int] = []
        self.conn: asyncpg.Connection | None = None
        self.own_xacts = 0

    async def __aenter__(self) -> AgentStack:
        done = await asyncio.to_thread(self.cli, "migrate")
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed: {done.stderr[-2000:]}")
        self.conn = await asyncpg.connect(self.url)
        self.pids[await self.conn.fetchval("SELECT pg_backend_pid()")] = "bench"
        assert self.servers.redis.process is not None
        self.pids[self.servers.redis.process.pid] = "redis"
        self.pids[self.procs.start("relay", ["relay"], self.env).pid] = "relay"
        args = ["worker", "--handler", f"{HANDLERS}:{self.handler}"]
        args += ["--concurrency", str(self.shape.per_worker)]
        for i in range(self.shape.workers):
            pid = self.procs.start(f"w{i}", args, self.env).pid
            self.pids[pid] = "worker"
            self.workers.append(pid)
        for i in range(self.shape.workers):
            await asyncio.to_thread(self.procs.wait_started, f"w{i}")
        await asyncio.sleep(0.5)  # the relay and the consumer groups settle (as worker.py)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await asyncio.to_thread(self.procs.stop_all)
        if self.conn is not None:
            await self.conn.close()
        admin = await asyncpg.connect(self.servers.url("postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await admin.close()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [python_of(ROOT), "-m", "awooop.cli", *args]
        return subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True)

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        assert self.conn is not None
        self.own_xacts += 1
        return list(await self.conn.fetch(f"{MARK} {query}", *args))

    async def value(self, query: str, *args: object) -> Any:
        assert self.conn is not None
        self.own_xacts += 1
        return await self.conn.fetchval(f"{MARK} {query}", *args)

    async def statuses(self) -> Counter[str]:
        rows = await self.fetch("SELECT status, count(*) AS n FROM awooop_run_state GROUP BY 1")
        return Counter({r["status"]: r["n"] for r in rows})

    async def wait_ended(self, count: int, within_s: float = 300) -> None:
        deadline = time.monotonic() + within_s
        ended = 0
        while ended < count and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            statuses = await self.statuses()
            ended = sum(statuses.get(s, 0) for s in TERMINAL)
        if ended < count:
            raise RuntimeError(f"{ended} of {count} runs ended in {within_s} s")

    async def xacts(self) -> tuple[int, float]:
        """(committed transactions of the benchmark database less the benchmark's own, when
        read); the other backends flush their counters within 10 s (``--settle``)."""
        await self.value("SELECT pg_stat_force_next_flush()::text")
        committed: int = await self.value(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return committed - self.own_xacts, time.time()


class Producer:
    """The benchmark's producer: one connection of its own, a caller's transaction."""

    def __init__(self, stack: AgentStack) -> None:
        self.stack = stack
        self.settings = load_settings(
            environ={}, database_url=stack.url, redis_url=stack.servers.redis.url
        )
        self.conn: asyncpg.Connection | None = None
        self.count = 0

    async def open(self) -> None:
        self.conn = await asyncpg.connect(self.stack.url)
        await init_connection(self.conn)  # the codecs a caller's pool sets up (docs/ingest.md)
        self.stack.pids[await self.conn.fetchval("SELECT pg_backend_pid()")] = "producer"

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def submit(
        self, runs: int, steps: int, batch: int, before_commit: Any = None
    ) -> list[str]:
        """``runs`` runs of ``steps`` steps in one transaction; ``before_commit()`` is called
        last inside it. The runs' ids."""
        assert self.conn is not None
        ids: list[str] = []
        async with self.conn.transaction():
            await set_tenant(self.conn, PROJECT)
            for start in range(0, runs, batch):
                events = [
                    ChannelEvent("api", uuid.uuid4().hex, {"steps": steps, "n": self.count + i})
                    for i in range(min(batch, runs - start))
                ]
                self.count += len(events)
                done = await submit_many(self.conn, PROJECT, events, settings=self.settings)
                ids.extend(str(d.run_id) for d in done)
            if before_commit is not None:
                before_commit()
        self.stack.own_xacts += 1  # the benchmark's, not the runtime's
        return ids


class Profiler:
    """``py-spy record`` attached to each worker (``--format raw``), stopped with SIGINT."""

    def __init__(self, pids: list[int], rate: int, directory: Path) -> None:
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.available = Path(self.exe).exists()
        self.pids, self.rate, self.directory = pids, rate, directory
        self.procs: list[tuple[Path, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        for pid in self.pids if self.available else []:
            out = self.directory / f"py-spy-{pid}.txt"
            argv = [self.exe, "record", "--pid", str(pid), "--rate", str(self.rate)]
            argv += ["--format", "raw", "--nonblocking", "-o", str(out)]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.procs.append((out, proc))

    def stop(self) -> str:
        """The samples of every worker, raw (one text)."""
        texts = []
        for out, proc in self.procs:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if out.exists():
                texts.append(out.read_text())
        return "\n".join(texts)


async def burst(
    stack: AgentStack, producer: Producer, args: argparse.Namespace, profiler: Profiler | None
) -> dict[str, Any]:
    """Submit the shape's runs, wait until each has ended; the CPU window, RSS samples, the
    commit time and the ids."""
    shape = stack.shape
    expected = sum((await stack.statuses()).values()) + shape.runs
    before: dict[str, Any] = {}

    def at_commit() -> None:
        if profiler is not None:
            profiler.start()
        before["procs"] = measure.snapshot()
        before["machine"] = measure.machine_ticks()

    ids = await producer.submit(shape.runs, shape.steps, args.batch, at_commit)
    committed_at = time.time()
    deadline = time.monotonic() + max(300.0, 10 * shape.ideal_s + 120)
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
    """The burst's runs as the log tells them: statuses, claims, calls, steps, completions."""
    mine = set(ids)
    rows = [r for r in await stack.fetch(JOURNAL, mark) if r["run"] in mine]
    runs = await stack.fetch(
        "SELECT status, (result->>'started')::float8 AS started, run_id::text AS run "
        "FROM awooop_run_state WHERE run_id::text = ANY($1)",
        ids,
    )
    claims: Counter[str] = Counter()
    claimed: dict[str, float] = {}
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
        "completed": completed,
        "calls": calls,
        "calls_per_run": calls_per_run,
        "steps": steps,
        "failed_calls": failed_calls,
    }


def verify(stack: AgentStack) -> dict[str, Any]:
    """``awooop replay run_state --verify`` (the processes stopped): the live run state equals
    its rebuild from the log. (The other projections are built by ``awooop projector``
    processes, which the benchmark does not run.)"""
    done = stack.cli("replay", "run_state", "--verify")
    text = (done.stdout + done.stderr).strip().splitlines()
    return {"exit_code": done.returncode, "last_lines": text[-3:]}


async def measure_shape(
    servers: Servers, shape: stats.Shape, args: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    notes: list[str] = []
    async with AgentStack(servers, shape, logs, args.api) as stack:
        producer = Producer(stack)
        await producer.open()
        try:
            await producer.submit(args.warmup, 1, args.batch)
            await stack.wait_ended(args.warmup)
            await asyncio.sleep(args.settle)  # counters flushed; the workers idle
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
            window = await burst(stack, producer, args, profiler)
        finally:
            await producer.close()
        hwm = [proc_status(p, "VmHWM") or 0 for p in stack.workers]
        peak = [max(a, b) for a, b in zip(hwm, window["rss_sampled_max"], strict=True)]
        await asyncio.sleep(args.settle)
        xact1, at1 = await stack.xacts()
        await asyncio.sleep(args.settle)
        xact2, at2 = await stack.xacts()
        log = await journal(stack, mark, window["ids"])
        await asyncio.to_thread(stack.procs.stop_all)
        replay = await asyncio.to_thread(verify, stack)
    return figures(shape, window, log, replay, cpu_split(stack, window), notes) | {
        "rss": {
            "idle_kb": idle_rss,
            "peak_kb": peak,
            "hwm_kb": hwm,
            "sampled_max_kb": window["rss_sampled_max"],
        },
        "xact": {"xact0": xact0, "xact1": xact1, "xact2": xact2, "at": [at0, at1, at2]},
    }


def figures(
    shape: stats.Shape,
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
    gaps = stats.step_overheads(log["calls"], shape.call_s)
    edges = stats.run_edges(log["claimed"], log["started"], log["calls"], log["completed"])
    cpu = stats.per_unit(cpu_s, shape.runs, shape.steps)
    before_m, after_m = window["before"]["machine"], window["after"]["machine"]
    busy_ticks = (after_m[0] - before_m[0]) - (after_m[1] - before_m[1])
    statuses = log["statuses"]
    not_completed = shape.runs - statuses.get("COMPLETED", 0)
    twice = stats.repeated(log["claims"], log["calls_per_run"], log["steps"], shape.steps)
    calls_short = sum(1 for r in log["claimed"] if log["calls_per_run"][r] < shape.steps)
    overhead = stats.spread(gaps["overhead"])
    return {
        "shape": {**shape.__dict__, "per_worker_concurrency": shape.per_worker},
        "summary": {
            "wall_s": round(wall, 3) if wall is not None else None,
            "ideal_s": round(shape.ideal_s, 3),
            "wall_to_ideal": round(wall / shape.ideal_s, 3) if wall and shape.ideal_s else None,
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


def finish(result: dict[str, Any], shape: stats.Shape) -> dict[str, Any]:
    """The figures that need the whole measurement: RSS per run in flight, transactions per
    step, the targets and the profile's split."""
    rss, xact = result.pop("rss"), result.pop("xact")
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
    }
    result["rss"] = rss
    result["targets"] = stats.targets(summary, shape.concurrency)
    raw = result.pop("profile_raw")
    if raw:
        worker_ms = summary["worker_cpu_ms_per_step"] or 0.0
        result["profile"] = stats.profile_split(stats.parse_raw(raw), worker_ms)
    return result


async def run_all(args: argparse.Namespace, shapes: dict[str, stats.Shape]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "agents",
        "command": " ".join(["ops/bench/agents.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {
            "shapes": {name: s.__dict__ for name, s in shapes.items()},
            **{k: getattr(args, k) for k in ("warmup", "settle", "batch", "profile", "api")},
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
                done = finish(await measure_shape(servers, shape, args, logs), shape)
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
        "--api", choices=sorted(API_HANDLERS), default="llm_step", help="how a step is written"
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
    except ValueError as exc:
        parser.error(str(exc))
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run_all(args, shapes))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "agents")


if __name__ == "__main__":
    main()
