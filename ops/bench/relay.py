"""Relay benchmark: throughput with the outbox pre-filled, commit-to-XADD latency under steady
load (with NOTIFY wake-up and with polling only), and what the NOTIFY trigger costs ingest.

    .venv/bin/python ops/bench/relay.py            # private Postgres + Redis, JSON on stdout
    .venv/bin/python ops/bench/relay.py --shared   # AWOOOP_DATABASE_URL / AWOOOP_REDIS_URL

By default it starts a private PostgreSQL cluster (fsync on, as in production) and a private
redis-server on free ports, so that other databases' transactions on a shared server (which
hold back the event log's xmin for every database of the cluster) do not distort the figures.
With --shared it creates a scratch database on the configured server and uses a unique key
prefix on the configured Redis, and drops/deletes both at the end.

Targets: relay >= 20,000 events/s; commit-to-XADD p99 <= 10 ms with NOTIFY.
Latency runs to the entry id of the XADD (Redis clock) and is reported twice, as bounds of
commit-to-XADD: from the database clock just before the producer's COMMIT (an upper bound: it
includes the commit's WAL flush, reported as ``commit_itself_ms``) and from the moment COMMIT
returned to the producer (a lower bound: the producer may resume after the relay already
published). It covers the NOTIFY delivery and the relay's read and publish, nothing of the
consumer side; all clocks are on one machine. The producers run ``--warmup`` seconds (default
1) before the counted phase and those samples are reported apart (``warmup``): a producer's
first statements on a fresh pool connection are prepared while its transaction holds an xid,
and the relay waits for it (R-31), which made every run's tail (all samples over 8 ms came in
the first 0.15 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import msgspec
import redis.asyncio as aioredis

from awooop.core.config import Settings, load_settings
from awooop.core.db import Database
from awooop.core.events import RunCreated, run_stream_id
from awooop.core.logs import configure_logging
from awooop.core.migrate import migrate
from awooop.core.pools import connect
from awooop.eventlog import runs as log_runs
from awooop.streams.envelope import FIELD, decode_envelope
from awooop.streams.keys import Keys
from awooop.streams.relay import Relay

PROJECTS = [f"bench{i}" for i in range(16)]
TRIGGER = "awooop_events_notify_relay"

# Pre-fill: realistic rows (a run's life: created, claimed, two steps, completed; 1 in 5 is a
# dispatch event), written straight into the log in transactions of 1000.
PREFILL = """
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data, metadata)
SELECT gen_random_uuid(), 'run-' || r.id, v.version, 'bench' || (r.n % 16), v.type,
       jsonb_build_object('type', v.type, 'at', now(), 'worker_id', 'worker-7', 'attempt', 1,
                          'input', jsonb_build_object('text', repeat('x', 120))),
       jsonb_build_object('traceparent',
                          '00-' || md5(r.id::text) || '-' || left(md5(r.n::text), 16) || '-01')
FROM (SELECT n, gen_random_uuid() AS id FROM generate_series($1::int, $2::int - 1) AS n) AS r
CROSS JOIN (VALUES (1, 'RunCreated'), (2, 'RunClaimed'), (3, 'StepCompleted'),
                   (4, 'StepCompleted'), (5, 'RunCompleted')) AS v(version, type)
"""


async def until(condition: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    for _ in range(int(within_s / 0.01)):
        if condition() or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.01)


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "p50": round(statistics.median(values), 1),
        "p99": round(percentile(values, 0.99), 1),
        "max": round(max(values), 1),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def create_run(db: Database, project: str) -> tuple[uuid.UUID, float]:
    """One run on the real write path; returns it and the DB clock (ms) just before COMMIT."""
    run_id = uuid.uuid4()

    async def once(conn: Any) -> float:
        now = await conn.fetchval("SELECT now()")
        event = RunCreated(
            at=now,
            run_id=run_id,
            project_id=project,
            channel_type="api",
            provider_event_id=str(run_id),
            input={"text": "x" * 120},
            max_attempts=3,
        )
        await log_runs.create_run(conn, event, {"traceparent": f"00-{run_id.hex}-{'1' * 16}-01"})
        before_commit: float = await conn.fetchval(
            "SELECT extract(epoch FROM clock_timestamp())::float8 * 1000"
        )
        return before_commit

    return run_id, await db.in_tenant(project, once)


async def throughput(settings: Settings, db: Database, redis: Any, events: int) -> dict[str, Any]:
    keys = Keys(settings.redis_key_prefix, settings.shard_count)
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        await relay.drain()  # take the lock, create the shards: not part of the measurement
        runs = events // 5
        async with db.platform_writes() as conn:
            for start in range(0, runs, 200):
                await conn.execute(PREFILL, start, min(runs, start + 200))
        started = time.perf_counter()
        published = await relay.drain(timeout_s=600)
        elapsed = time.perf_counter() - started
    finally:
        await relay.close()
    return {
        "events": published,
        "seconds": round(elapsed, 3),
        "events_per_s": round(published / elapsed),
        "batch_size": settings.relay_batch_size,
        "target_events_per_s": 20_000,
    }


async def start_relay_process(settings: Settings) -> asyncio.subprocess.Process:
    """``awooop relay`` in its own process, as in production."""
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_REDIS_URL": settings.redis_url,
        "AWOOOP_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "AWOOOP_RELAY_POLL_INTERVAL_S": str(settings.relay_poll_interval_s),
        "AWOOOP_LOG_LEVEL": "error",
        "OTEL_TRACES_EXPORTER": "none",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awooop.cli",
        "relay",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def steady_latency(
    settings: Settings,
    db: Database,
    redis: Any,
    rate: float,
    duration: float,
    notify: bool,
    warmup_s: float = 1.0,
) -> dict[str, Any]:
    keys = Keys(settings.redis_key_prefix, settings.shard_count)
    await set_trigger(settings.database_url, enabled=notify)
    committed: dict[str, float] = {}  # DB clock just before COMMIT (ms)
    returned: dict[str, float] = {}  # client clock when COMMIT returned (ms)
    published: dict[str, int] = {}
    stop = asyncio.Event()

    async def reader() -> None:
        # Start after each stream's current last entry ("$" would skip, on every call, what
        # arrived in the other streams since the previous call).
        last: dict[str, str] = {}
        for shard in keys.shards():
            stream = keys.events_stream(shard)
            newest = await redis.xrevrange(stream, count=1)
            last[stream] = newest[0][0].decode() if newest else "0-0"
        client = aioredis.Redis.from_url(settings.redis_url)
        try:
            while not stop.is_set():
                replies = await client.xread(last, block=200, count=1000)
                for stream, entries in replies or []:
                    for entry_id, fields in entries:
                        last[stream.decode()] = entry_id.decode()
                        envelope = decode_envelope(fields[FIELD])
                        published[envelope.stream_id] = int(entry_id.split(b"-")[0])
        finally:
            await client.aclose()

    async def producer(index: int, workers: int) -> None:
        interval = workers / rate
        next_at = time.monotonic() + random.uniform(0, interval)
        end = time.monotonic() + warmup_s + duration
        while next_at < end:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            run_id, before_commit = await create_run(db, random.choice(PROJECTS))
            returned[run_stream_id(run_id)] = time.time() * 1000
            committed[run_stream_id(run_id)] = before_commit
            next_at += interval

    counted_from = 0.0
    relay = await start_relay_process(settings)
    read_task = asyncio.create_task(reader())
    try:
        await asyncio.sleep(0.3)
        warm_up = run_stream_id((await create_run(db, PROJECTS[0]))[0])  # relay up and leading
        await until(lambda: warm_up in published, 30)
        workers = 8
        counted_from = time.time() * 1000 + warmup_s * 1000  # client clock, as ``returned``
        await asyncio.gather(*(producer(i, workers) for i in range(workers)))
        await until(lambda: not set(committed) - set(published), 10)
    finally:
        stop.set()
        await read_task
        await stop_process(relay)
        await set_trigger(settings.database_url, enabled=True)
    early = [s for s in committed if s in published and returned[s] < counted_from]
    done = [s for s in committed if s in published and returned[s] >= counted_from]
    upper = [published[s] - committed[s] for s in done]  # includes the COMMIT (WAL flush)
    lower = [published[s] - returned[s] for s in done]  # late by the client's own scheduling
    commits = [returned[s] - committed[s] for s in done]
    return {
        "notify": notify,
        "poll_interval_s": settings.relay_poll_interval_s,
        "target_rate_per_s": rate,
        "achieved_rate_per_s": round(len(committed) / (warmup_s + duration), 1),
        "samples": len(done),
        "warmup": {
            "seconds": warmup_s,
            "samples": len(early),
            "from_commit_returned_ms": summary([published[s] - returned[s] for s in early]),
        },
        "missing": len(set(committed) - set(published)),
        "from_before_commit_ms": summary(upper),
        "from_commit_returned_ms": summary(lower),
        "commit_itself_ms": summary(commits),
        "target_p99_ms": 10 if notify else None,
    }


async def ingest_rate(settings: Settings, db: Database, duration: float, notify: bool) -> float:
    """Runs/s that 8 concurrent producers commit, with the trigger on or off (relay running)."""
    await set_trigger(settings.database_url, enabled=notify)
    count = 0
    end = time.monotonic() + duration

    async def producer() -> None:
        nonlocal count
        while time.monotonic() < end:
            await create_run(db, random.choice(PROJECTS))
            count += 1

    try:
        await asyncio.gather(*(producer() for _ in range(8)))
    finally:
        await set_trigger(settings.database_url, enabled=True)
    return count / duration


async def set_trigger(url: str, *, enabled: bool) -> None:
    action = "ENABLE" if enabled else "DISABLE"
    conn = await connect(url)  # the migrating (owner) role, not an app role
    try:
        await conn.execute(f"ALTER TABLE awooop_events {action} TRIGGER {TRIGGER}")
    finally:
        await conn.close()


async def bench(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    await migrate(settings.database_url)
    db = await Database.open(settings.database_url, max_size=12)
    redis = aioredis.Redis.from_url(settings.redis_url)
    try:
        result: dict[str, Any] = {
            "throughput": await throughput(settings, db, redis, args.events),
        }
        result["latency_notify"] = await steady_latency(
            settings, db, redis, args.rate, args.duration, notify=True, warmup_s=args.warmup
        )
        result["latency_poll_only"] = await steady_latency(
            settings, db, redis, args.rate, args.duration, notify=False, warmup_s=args.warmup
        )
        relay = await start_relay_process(settings)
        rates: dict[bool, list[float]] = {True: [], False: []}
        try:
            for _ in range(args.rounds):  # alternate, so that drifting load hits both alike
                for notify in (True, False):
                    rates[notify].append(await ingest_rate(settings, db, args.duration, notify))
        finally:
            await stop_process(relay)
        with_notify, without = statistics.median(rates[True]), statistics.median(rates[False])
        result["notify_ingest_cost"] = {
            "producers": 8,
            "rounds": args.rounds,
            "runs_per_s_with_trigger": [round(r, 1) for r in rates[True]],
            "runs_per_s_without_trigger": [round(r, 1) for r in rates[False]],
            "median_ratio": round(with_notify / without, 3) if without else None,
        }
        return result
    finally:
        await redis.aclose()
        await db.close()


async def cleanup_shared(settings: Settings, server_url: str) -> None:
    from tests.support import databases

    await databases.drop_database(server_url, settings.database_name)
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        doomed = [k async for k in client.scan_iter(match=f"{settings.redis_key_prefix}:*")]
        if doomed:
            await client.delete(*doomed)
    finally:
        await client.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000, help="pre-filled events")
    parser.add_argument("--rate", type=float, default=200.0, help="steady runs/s for latency")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per steady phase")
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="seconds of load before the latency count"
    )
    parser.add_argument("--rounds", type=int, default=3, help="NOTIFY on/off ingest rounds")
    parser.add_argument("--shared", action="store_true", help="use the configured servers")
    args = parser.parse_args()
    configure_logging("error")
    scratch = f"awooop_bench_{uuid.uuid4().hex[:8]}"
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    environment: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "mode": "shared" if args.shared else "private",
    }
    if args.shared:
        from tests.support.databases import with_database

        base = load_settings()
        url = with_database(base.database_url, scratch)
        settings = msgspec.structs.replace(base, database_url=url, redis_key_prefix=prefix)
        try:
            result = asyncio.run(bench(settings, args))
        finally:
            asyncio.run(cleanup_shared(settings, base.database_url))
    else:
        from awooop.demo.servers import PostgresServer
        from tests.support.databases import with_database
        from tests.support.services import private_redis

        class DurablePostgres(PostgresServer):
            """fsync on, as in production: commit cost matters to the NOTIFY measurement."""

            def start(self) -> None:
                self.init()
                options = (
                    f"-p {self.port} -c listen_addresses=127.0.0.1 "
                    f"-c unix_socket_directories={self.dir} -c max_connections=100"
                )
                self._run(
                    str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
                    "-l", str(self.dir / "log"), "-w", "start",
                )  # fmt: skip

        directory = Path(tempfile.mkdtemp(prefix="awooop-bench-pg-"))
        pg = DurablePostgres(directory)
        pg.start()
        try:
            with private_redis() as redis_server:
                settings = load_settings(
                    environ={},
                    database_url=with_database(pg.url, scratch),
                    redis_url=redis_server.url,
                    redis_key_prefix=prefix,
                )
                result = asyncio.run(bench(settings, args))
        finally:
            pg.stop("immediate")
            shutil.rmtree(directory, ignore_errors=True)
    result["environment"] = environment
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
