"""Benchmark of the worker runtime: end-to-end throughput, ingest-to-start latency, recovery.

    .venv/bin/python ops/bench/worker.py [--runs 5000] [--workers 1,2,4] [--concurrency 64]
                                         [--rate 100] [--seconds 10] [--latency-workers 1,4]
                                         [--latency-repeats 3]
                                         [--no-recovery]
                                         [--no-streams] [--parts throughput,latency,recovery]
                                         [--redis-cluster] [--out FILE]

Prints one JSON document (a short summary goes to stderr). Every process is real: one
``awooop relay`` and N ``awooop worker`` subprocesses; runs are ingested through the producer
library (``awooop.producer``, the same ingest transaction as the HTTP server: dedupe row,
run, ``RunCreated``).

- ``throughput``: for 1, 2 and 4 worker processes, ``--runs`` no-op runs ingested in
  batches of 500 (``submit_many``) as fast as possible while the workers run; runs/s from the
  first ingest commit to the last COMPLETED (ingest → relay → work stream → claim → handler →
  COMPLETED). Target: ≥ 1,000/s with 4 workers.
- ``latency``: runs ingested one per transaction (``submit``) at a paced ``--rate`` per second for
  ``--seconds`` with 1 and 4 workers (``--latency-workers``); ingest-to-start = the handler's
  start time (wall clock) minus
  the ingest commit (wall clock, same host). p50/p99/max in ms. Target: p99 ≤ 10 ms at 100/s.
  Each worker count runs ``--latency-repeats`` times (default 3); ``p50_ms``/``p99_ms`` are the
  medians over the runs, ``p99_ms_each`` and ``runs`` give every run.
  The first ``--warmup`` seconds (default 1) of paced runs are counted apart (``warmup``: the
  first statements of each connection, caches): the steady state is what the target is about.
- ``recovery``: default lease settings (lease 30 s, heartbeat 5 s, reclaim 10 s); a worker
  holding a run is killed with SIGKILL while a second worker runs; seconds from the kill to
  COMPLETED, against the bound lease TTL + reclaim interval (40 s). Takes up to ~40 s.

``--no-streams`` runs workers in polling mode without a relay (for comparison). Scratch
databases are created and dropped on ``AWOOOP_BENCH_DATABASE_URL`` /
``AWOOOP_TEST_DATABASE_URL`` (default the local server); Redis keys use a scratch prefix on
``AWOOOP_REDIS_URL`` and are deleted afterwards. ``--redis-cluster`` starts a private Redis
Cluster of three masters on loopback ports instead (``awooop.demo.servers.RedisCluster``; no
replicas, no persistence) and points every process at it (``redis+cluster://``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from awooop.core.config import Settings, load_settings  # noqa: E402
from awooop.core.db import Database  # noqa: E402 - after the sys.path line, for a plain script
from awooop.core.events import run_id_of_stream  # noqa: E402
from awooop.core.migrate import migrate  # noqa: E402
from awooop.demo.servers import RedisCluster  # noqa: E402
from awooop.producer import ChannelEvent, submit, submit_many  # noqa: E402
from awooop.services import redis_client  # noqa: E402
from awooop.streams.envelope import FIELD, decode_envelope  # noqa: E402
from awooop.streams.keys import Keys  # noqa: E402

PROJECT = "bench"
HANDLERS = "worker_handlers"


def server_url() -> str:
    return (
        os.environ.get("AWOOOP_BENCH_DATABASE_URL")
        or os.environ.get("AWOOOP_TEST_DATABASE_URL")
        or "postgresql://postgres@127.0.0.1:5432/postgres"
    )


def redis_url() -> str:
    return os.environ.get("AWOOOP_REDIS_URL", "redis://127.0.0.1:6379/0")


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Scratch:
    """A fresh migrated database and a Redis key prefix, removed on exit."""

    def __init__(self) -> None:
        self.name = f"awooop_bench_{uuid.uuid4().hex[:10]}"
        self.url = with_database(server_url(), self.name)
        self.prefix = f"bench{uuid.uuid4().hex[:8]}"

    async def __aenter__(self) -> Scratch:
        await migrate(self.url)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        admin = await asyncpg.connect(with_database(server_url(), "postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await admin.close()
        client = redis_client(redis_url())
        try:
            keys = [k async for k in client.scan_iter(match=f"{self.prefix}:*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()

    def settings(self) -> Settings:
        return load_settings(environ={}, database_url=self.url, redis_url=redis_url())

    def env(self, **settings: str) -> dict[str, str]:
        return process_env(self.url, redis_url(), self.prefix, ROOT, **settings)


def process_env(
    database_url: str, redis: str, prefix: str, code: Path, **settings: str
) -> dict[str, str]:
    """The environment of a benchmark's ``awooop`` processes: this one's without AWOOOP_*
    variables, the scratch database and key prefix, ``settings`` as AWOOOP_<NAME>, and the
    checkout ``code`` (this one, or another's: ``cost.py --code``) plus ``ops/bench`` (the
    benchmark handlers) on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWOOOP_")}
    env.update(
        AWOOOP_DATABASE_URL=database_url,
        AWOOOP_REDIS_URL=redis,
        AWOOOP_REDIS_KEY_PREFIX=prefix,
        AWOOOP_LOG_LEVEL="warning",
        PYTHONPATH=os.pathsep.join([str(code), str(ROOT / "ops" / "bench")]),
    )
    env.update({f"AWOOOP_{k.upper()}": v for k, v in settings.items()})
    return env


def python_of(code: Path) -> str:
    """The interpreter that runs the checkout ``code``: this one for this checkout, the other
    checkout's own ``.venv`` where it has one (``make install`` there), else this one too, the
    checkout first on ``PYTHONPATH`` (:func:`process_env`; ``scheduler.py`` records where
    each side imported ``awooop`` from)."""
    if code.resolve() == ROOT:
        return sys.executable
    python = code / ".venv" / "bin" / "python"
    return str(python) if python.exists() else sys.executable


class Processes:
    """``awooop`` subprocesses of one checkout (``code``: this one unless told), logs in
    ``directory``."""

    def __init__(self, directory: Path, code: Path = ROOT) -> None:
        self.directory = directory
        self.code = code
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = open(self.directory / f"{name}.out", "wb")  # noqa: SIM115 - closed by the child's end
        err = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [python_of(self.code), "-m", "awooop.cli", *args],
            cwd=self.code,
            env=env,
            stdout=out,
            stderr=err,
        )
        self.procs.append((name, proc))
        return proc

    def wait_started(self, name: str, within_s: float = 60) -> None:
        path = self.directory / f"{name}.out"
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if path.exists() and " started" in path.read_text():
                return
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not start: {(self.directory / f'{name}.log').read_text()}")

    def stop_all(self) -> None:
        for _name, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _name, proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def event(n: int | None = None) -> ChannelEvent:
    return ChannelEvent("api", uuid.uuid4().hex, {"n": n or 1})


async def ingest_batch(db: Database, settings: Settings, count: int) -> list[uuid.UUID]:
    """``count`` runs through the ingest path's batch call (one transaction)."""
    done = await submit_many(db, PROJECT, [event(i) for i in range(count)], settings=settings)
    return [d.run_id for d in done]


async def count_status(db: Database, status: str) -> int:
    async with db.platform() as conn:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM awooop_run_state WHERE status = $1", status
        )
    return n


async def wait_count(db: Database, status: str, count: int, within_s: float) -> int:
    deadline = time.monotonic() + within_s
    seen = await count_status(db, status)
    while seen < count and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        seen = await count_status(db, status)
    return seen


def start_stack(
    procs: Processes, env: dict[str, str], workers: int, handler: str, extra: list[str]
) -> None:
    if "--no-streams" not in extra:
        procs.start("relay", ["relay"], env)
    for i in range(workers):
        procs.start(f"w{i}", ["worker", "--handler", f"{HANDLERS}:{handler}", *extra], env)
    for i in range(workers):
        procs.wait_started(f"w{i}")
    time.sleep(0.5)  # the relay and the consumer groups settle


async def throughput(
    workers: int, runs: int, concurrency: int, extra: list[str], tmp: Path
) -> dict[str, Any]:
    async with Scratch() as scratch:
        procs = Processes(tmp)
        db = await Database.open(scratch.url, max_size=4)
        try:
            start_stack(
                procs, scratch.env(), workers, "noop", [*extra, "--concurrency", str(concurrency)]
            )
            started = time.perf_counter()
            ingested = 0
            while ingested < runs:
                batch = min(500, runs - ingested)
                await ingest_batch(db, scratch.settings(), batch)
                ingested += batch
            ingest_s = time.perf_counter() - started
            done = await wait_count(db, "COMPLETED", runs, within_s=600)
            elapsed = time.perf_counter() - started
            stages = await stage_times(db)
        finally:
            procs.stop_all()
            await db.close()
    return {
        "workers": workers,
        "runs": runs,
        "completed": done,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(done / elapsed, 1),
        "ingest_runs_per_s": round(runs / ingest_s, 1),
        "stages_s": stages,
    }


async def stage_times(db: Database) -> dict[str, list[float]]:
    """Seconds from the first RunCreated to the first, median and last event of each type:
    shows which stage (ingest, claim, completion) the others wait for."""
    async with db.platform_writes() as conn:
        rows = await conn.fetch(
            "WITH t AS (SELECT event_type, extract(epoch FROM recorded_at)::float8 AS at "
            "FROM awooop_events WHERE event_type IN ('RunCreated', 'RunClaimed', 'RunCompleted')) "
            "SELECT event_type, min(at) AS low, "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY at) AS p50, "
            "max(at) AS last, (SELECT min(at) FROM t) AS first FROM t GROUP BY event_type"
        )
    return {
        r["event_type"]: [round(r[k] - r["first"], 3) for k in ("low", "p50", "last")] for r in rows
    }


async def latency(
    workers: int, rate: float, seconds: float, extra: list[str], tmp: Path, warmup_s: float = 1.0
) -> dict[str, Any]:
    async with Scratch() as scratch:
        procs = Processes(tmp)
        db = await Database.open(scratch.url, max_size=4)
        committed: dict[uuid.UUID, float] = {}
        warming: set[uuid.UUID] = set()  # the first warmup_s: reported apart
        try:
            start_stack(procs, scratch.env(), workers, "stamp", extra)
            warm = int(rate * warmup_s)
            total = warm + int(rate * seconds)
            begin = time.perf_counter()
            for i in range(total):
                delay = begin + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                done = await submit(db, PROJECT, event(i), settings=scratch.settings())
                committed[done.run_id] = time.time()
                if i < warm:
                    warming.add(done.run_id)
            await wait_count(db, "COMPLETED", total, within_s=60)
            async with db.platform_writes() as conn:
                rows = await conn.fetch(
                    "SELECT r.run_id, r.result, "
                    "extract(epoch FROM (e.data->>'at')::timestamptz)::float8 AS claimed "
                    "FROM awooop_run_state r JOIN awooop_events e "
                    "ON e.stream_id = 'run-' || r.run_id AND e.event_type = 'RunClaimed' "
                    "WHERE r.status = 'COMPLETED'"
                )
            published = await xadd_times(scratch)
        finally:
            procs.stop_all()
            await db.close()
    first = [(r["result"] - committed[r["run_id"]]) * 1000 for r in rows if r["run_id"] in warming]
    mine = [r for r in rows if r["run_id"] in committed and r["run_id"] not in warming]
    lat = [(r["result"] - committed[r["run_id"]]) * 1000 for r in mine]
    # Where the time goes (wall clocks of one host; the XADD time is the entry id's ms).
    seen = [r for r in mine if r["run_id"] in published]  # acknowledged entries may be trimmed
    relay = [published[r["run_id"]] * 1000 - committed[r["run_id"]] * 1000 for r in seen]
    claim = [(r["claimed"] - published[r["run_id"]]) * 1000 for r in seen]
    start = [(r["result"] - r["claimed"]) * 1000 for r in mine]
    return {
        "workers": workers,
        "rate_per_s": rate,
        "runs": len(committed) - len(warming),
        "completed": len(lat),
        "warmup": {
            "seconds": warmup_s,
            "runs": len(first),
            "p99_ms": round(percentile(first, 0.99), 2) if first else None,
            "max_ms": round(max(first), 2) if first else None,
        },
        "p50_ms": round(percentile(lat, 0.50), 2),
        "p99_ms": round(percentile(lat, 0.99), 2),
        "max_ms": round(max(lat), 2) if lat else None,
        "breakdown_runs": len(seen),
        "breakdown_p50_p99_ms": {
            "commit_to_xadd": [round(percentile(relay, q), 2) for q in (0.5, 0.99)],
            "xadd_to_claim_tx_start": [round(percentile(claim, q), 2) for q in (0.5, 0.99)],
            "claim_tx_start_to_handler": [round(percentile(start, q), 2) for q in (0.5, 0.99)],
        },
    }


def over_repeats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians of repeated latency runs (this VM's figures move between runs; one run's
    p99 is its ~10 slowest runs), each run's p99, and every run in full."""
    return {
        "workers": runs[0]["workers"],
        "rate_per_s": runs[0]["rate_per_s"],
        "repeats": len(runs),
        "p50_ms": round(statistics.median(r["p50_ms"] for r in runs), 2),
        "p99_ms": round(statistics.median(r["p99_ms"] for r in runs), 2),
        "p99_ms_each": [r["p99_ms"] for r in runs],
        "max_ms": max(r["max_ms"] for r in runs if r["max_ms"] is not None),
        "warmup_p99_ms_each": [r["warmup"]["p99_ms"] for r in runs],
        "runs": runs,
    }


async def floor(rate: float, seconds: float) -> dict[str, Any]:
    """What one hop costs on this machine at the same pace, with nothing of AwoooP in it: a
    bare XADD seen by XREADGROUP BLOCK in another process, and a bare one-row transaction
    (BEGIN, INSERT, COMMIT). Ingest-to-start crosses at least two such hops and two commits."""
    key = f"bench-floor-{uuid.uuid4().hex[:8]}"
    reader = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "floor-reader",
        redis_url(),
        key,
        str(int(rate * seconds)),
        stdout=asyncio.subprocess.PIPE,
    )
    client = redis_client(redis_url())
    try:
        for _ in range(200):  # until the reader's group is in place
            if await client.exists(key):
                break
            await asyncio.sleep(0.05)
        begin = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await client.xadd(key, {"t": repr(time.time())})
        out, _ = await reader.communicate()
    finally:
        await client.delete(key)
        await client.aclose()
    hops = [float(x) for x in out.split()]
    async with Scratch() as scratch:
        conn = await asyncpg.connect(scratch.url)
        try:
            await conn.execute("CREATE TABLE floor_probe (n int)")
            commits: list[float] = []
            begin = time.perf_counter()
            for i in range(int(rate * seconds)):
                delay = begin + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                started = time.perf_counter()
                async with conn.transaction():
                    await conn.execute("INSERT INTO floor_probe VALUES ($1)", i)
                commits.append((time.perf_counter() - started) * 1000)
        finally:
            await conn.close()
    return {
        "rate_per_s": rate,
        "redis_hop_ms": {
            q: round(percentile(hops, v), 2) for q, v in (("p50", 0.5), ("p99", 0.99))
        },
        "commit_ms": {
            q: round(percentile(commits, v), 2) for q, v in (("p50", 0.5), ("p99", 0.99))
        },
    }


async def floor_reader(url: str, key: str, count: int) -> None:
    client = redis_client(url)
    await client.xgroup_create(key, "floor", id="$", mkstream=True)
    seen: list[float] = []
    while len(seen) < count:
        for _stream, entries in await client.xreadgroup("floor", "r", {key: ">"}, block=5000) or []:
            now = time.time()
            seen.extend((now - float(fields[b"t"])) * 1000 for _id, fields in entries)
    await client.aclose()
    print(" ".join(f"{v:.3f}" for v in seen))


async def xadd_times(scratch: Scratch) -> dict[uuid.UUID, float]:
    """Unix time of each run's RunCreated entry in the work streams (from the entry id)."""
    settings = scratch.settings()
    keys = Keys(scratch.prefix, settings.shard_count)
    client = redis_client(redis_url())
    found: dict[uuid.UUID, float] = {}
    try:
        for shard in keys.shards():
            for entry_id, fields in await client.xrange(keys.work_stream(shard)):
                envelope = decode_envelope(fields[FIELD])
                run_id = run_id_of_stream(envelope.stream_id)
                if run_id is not None and envelope.event_type == "RunCreated":
                    found.setdefault(run_id, int(entry_id.split(b"-")[0]) / 1000)
    finally:
        await client.aclose()
    return found


async def recovery(extra: list[str], tmp: Path) -> dict[str, Any]:
    async with Scratch() as scratch:
        procs = Processes(tmp)
        db = await Database.open(scratch.url, max_size=2)
        env = scratch.env()  # default lease settings
        try:
            if "--no-streams" not in extra:
                procs.start("relay", ["relay"], env)
            victim = procs.start(
                "victim", ["worker", "--handler", f"{HANDLERS}:hang_first_attempt", *extra], env
            )
            procs.wait_started("victim")
            [run_id] = await ingest_batch(db, scratch.settings(), 1)
            await wait_count(db, "RUNNING", 1, within_s=60)
            procs.start(
                "survivor", ["worker", "--handler", f"{HANDLERS}:hang_first_attempt", *extra], env
            )
            procs.wait_started("survivor")
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed = time.perf_counter()
            await wait_count(db, "COMPLETED", 1, within_s=120)
            recovered = time.perf_counter() - killed
        finally:
            procs.stop_all()
            await db.close()
    return {
        "lease_ttl_s": 30.0,
        "reclaim_interval_s": 10.0,
        "bound_s": 40.0,
        "recovery_s": round(recovered, 2),
        "run_id": str(run_id),
    }


async def run_all() -> tuple[str, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="seconds of paced runs before the latency count"
    )
    parser.add_argument(
        "--latency-workers", default="1,4", help="worker process counts for the latency part"
    )
    parser.add_argument(
        "--latency-repeats",
        type=int,
        default=3,
        help="latency runs per worker count; p50/p99 are their medians",
    )
    parser.add_argument("--no-recovery", action="store_true")
    parser.add_argument("--parts", default="throughput,latency,recovery", help="which parts to run")
    parser.add_argument("--no-streams", action="store_true")
    parser.add_argument(
        "--redis-cluster", action="store_true", help="run on a private 3-master Redis Cluster"
    )
    parser.add_argument("--out", default=None)
    parser.add_argument("--keep-logs", default=None, help="a folder for the processes' logs")
    args = parser.parse_args()
    extra = ["--no-streams"] if args.no_streams else []
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "mode": "polling" if args.no_streams else "streams",
        "redis": "cluster of 3 masters" if args.redis_cluster else "single",
    }
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="awooop-bench-") as scratch_dir:
        tmp = args.keep_logs or scratch_dir
        os.makedirs(tmp, exist_ok=True)
        cluster = RedisCluster(Path(scratch_dir) / "cluster") if args.redis_cluster else None
        try:
            if cluster is not None:
                cluster.start()
                os.environ["AWOOOP_REDIS_URL"] = cluster.url  # redis_url() and the processes
            await run_parts(report, parts, args, extra, Path(tmp))
        finally:
            if cluster is not None:
                cluster.stop()
    report["machine"]["load_avg_after"] = os.getloadavg()
    return json.dumps(report, indent=2), args.out


async def run_parts(
    report: dict[str, Any], parts: set[str], args: argparse.Namespace, extra: list[str], tmp: Path
) -> None:
    if "throughput" in parts:
        report["throughput"] = []
        for n in (int(x) for x in args.workers.split(",")):
            result = await throughput(n, args.runs, args.concurrency, extra, tmp)
            report["throughput"].append(result)
            print(f"throughput {n} worker(s): {result['runs_per_s']} runs/s", file=sys.stderr)
    if "latency" in parts:
        report["floor"] = await floor(args.rate, args.seconds / 2)
        print(f"floor: {report['floor']}", file=sys.stderr)
        report["latency"] = []
        for n in (int(x) for x in args.latency_workers.split(",")):
            runs = []
            for _ in range(args.latency_repeats):
                runs.append(await latency(n, args.rate, args.seconds, extra, tmp, args.warmup))
                print(f"latency {n} worker(s): {runs[-1]}", file=sys.stderr)
            report["latency"].append(over_repeats(runs))
    if "recovery" in parts and not args.no_recovery:
        report["recovery"] = await recovery(extra, tmp)
        print(f"recovery: {report['recovery']}", file=sys.stderr)


def main() -> None:
    text, out = asyncio.run(run_all())
    if out:
        Path(out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "floor-reader":
        asyncio.run(floor_reader(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        main()
