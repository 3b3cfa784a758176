"""Benchmark of channel ingest: HTTP, the producer library, dedupe expiry, and pgbench beside.

    .venv/bin/python ops/bench/ingest.py [--duration 10] [--clients 1,8,32] [--workers 1,2]
                                         [--batches 20] [--expiry-rows 1000000] [--out FILE]
                                         [--parts pgbench,http,submit_many,expiry]

Prints one JSON document (and a short table on stderr):
- ``http``: per server process count (``awooop serve --workers W``, a real subprocess) and per
  client count: new events/s (every request a fresh Idempotency-Key on the API channel),
  p50/p99 request latency, errors, the server's CPU milliseconds per request and how busy
  the whole machine was (a figure taken on a busy machine says little about the code); the
  load generator is a separate process (raw HTTP/1.1 keep-alive connections on uvloop, one
  per client). Target: >= 2,500 new events/s at 32 clients with p99 < 50 ms.
- ``duplicates``: repeats of keys already ingested at 32 clients: rejections/s and latency.
- ``submit_many``: events/s through ``producer.submit_many`` in batches of 1,000 on one
  connection (target >= 10,000/s), and with 2 submitters at once.
- ``expiry``: one pass of the ``dedupe_expiry`` loop's drop
(awooop.eventlog.dedupe_windows.drop_dead)
  over a dead window of 10k, 100k and 1M expired rows, beside half as many live rows: its
  time and the WAL it writes. The window goes with DETACH CONCURRENTLY and DROP TABLE: no row
  is deleted one by one, so the WAL stays the same whatever the window holds; the time grows
  with the two reads of the window (its newest expiry, checked before and after the detach).
- ``pgbench``: single-row upserts/s (``INSERT ... ON CONFLICT DO UPDATE``, prepared) at 1 and 8
  clients in a scratch database, from the same run, for scale.

Scratch databases (created and dropped) live on ``AWOOOP_BENCH_DATABASE_URL`` /
``AWOOOP_TEST_DATABASE_URL`` (default the local server); Redis is only pinged by /readyz.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from awooop.core.db import Database  # noqa: E402 - after the sys.path line, for a plain script
from awooop.core.migrate import migrate  # noqa: E402
from awooop.demo.servers import free_port  # noqa: E402
from awooop.eventlog import dedupe_windows as windows  # noqa: E402
from awooop.ingest import credentials  # noqa: E402
from awooop.producer import ChannelEvent, submit_many  # noqa: E402

PROJECT = "bench"
REPEAT_KEYS = 10
BODY = json.dumps(
    {"task": "summarise incident INC-42", "priority": "high", "labels": {"team": "sre"}}
).encode()


def server_url() -> str:
    return (
        os.environ.get("AWOOOP_BENCH_DATABASE_URL")
        or os.environ.get("AWOOOP_TEST_DATABASE_URL")
        or "postgresql://postgres@127.0.0.1:5432/postgres"
    )


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def process_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and its direct children (serve --workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == root or int(fields[1]) == root:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def machine_busy() -> tuple[int, int]:
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait


# --- the load generator (runs as its own process) -------------------------------------------


async def load(
    port: int, token: str, clients: int, duration: float, keys: str, prefix: str
) -> dict[str, Any]:
    """``clients`` keep-alive connections posting API events for ``duration`` seconds.

    keys=new: every request a fresh Idempotency-Key (prefix-client-n); keys=repeat: cycle over
    the first REPEAT_KEYS keys per client that an earlier ``new`` run with the same prefix
    created (a client that made fewer shows up as 202s in ``statuses``).
    """
    head = (
        f"POST /v1/projects/{PROJECT}/channels/api HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n"
    ).encode()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    deadline = time.perf_counter() + duration

    async def client(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        n = 0
        try:
            while time.perf_counter() < deadline:
                key = f"{prefix}-{index}-{n if keys == 'new' else n % REPEAT_KEYS}"
                n += 1
                started = time.perf_counter()
                writer.write(head + f"Idempotency-Key: {key}\r\n\r\n".encode() + BODY)
                header = await reader.readuntil(b"\r\n\r\n")
                status = int(header[9:12])
                match = re.search(rb"(?i)content-length:\s*(\d+)", header)
                await reader.readexactly(int(match.group(1)) if match else 0)
                latencies.append(time.perf_counter() - started)
                statuses[status] = statuses.get(status, 0) + 1
        except (OSError, asyncio.IncompleteReadError) as exc:
            errors.append(repr(exc))
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "keys": keys,
        "requests": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "errors": errors[:5],
    }


def run_load(port: int, token: str, clients: int, duration: float, keys: str, prefix: str) -> Any:
    result = subprocess.run(
        [
            sys.executable,
            __file__,
            "loadgen",
            str(port),
            token,
            str(clients),
            str(duration),
            keys,
            prefix,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 120,
    )
    return json.loads(result.stdout)


# --- phases ----------------------------------------------------------------------------------


def start_server(env: dict[str, str], port: int, workers: int, log: Path) -> subprocess.Popen[Any]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "awooop.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ],
        env=env,
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return process
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"awooop serve did not start; see {log}")
        time.sleep(0.2)


def stop_server(process: subprocess.Popen[Any]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def bench_http(
    url: str, token: str, clients: list[int], workers: list[int], duration: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": url,
        "AWOOOP_LOG_LEVEL": "warning",
    }
    log = Path(tempfile.gettempdir()) / f"awooop-bench-serve-{os.getpid()}.log"
    results: list[dict[str, Any]] = []
    duplicates: list[dict[str, Any]] = []
    for count in workers:
        port = free_port()
        server = start_server(env, port, count, log)
        try:
            run_load(port, token, 8, 2.0, "new", f"warm-{count}")  # warm up pools and caches
            for n in clients:
                prefix = f"w{count}c{n}-{uuid.uuid4().hex[:6]}"
                cpu_before, busy_before = process_cpu_s(server.pid), machine_busy()
                result = run_load(port, token, n, duration, "new", prefix)
                cpu_after, busy_after = process_cpu_s(server.pid), machine_busy()
                result["server_cpu_ms_per_request"] = round(
                    (cpu_after - cpu_before) * 1000 / max(1, result["requests"]), 3
                )
                idle = (busy_after[1] - busy_before[1]) / max(1, busy_after[0] - busy_before[0])
                result["machine_busy"] = round(1 - idle, 2)
                results.append({"workers": count, **result})
                print(f"  http workers={count} clients={n}: {result}", file=sys.stderr)
                if n == max(clients):
                    dup = run_load(port, token, n, duration, "repeat", prefix)
                    duplicates.append({"workers": count, **dup})
                    print(f"  duplicates workers={count}: {dup}", file=sys.stderr)
        finally:
            stop_server(server)
    return results, duplicates


async def bench_submit_many(url: str, batches: int) -> dict[str, Any]:
    db = await Database.open(url, max_size=4)
    try:
        out: dict[str, Any] = {"batch_size": 1000}
        for submitters in (1, 2):

            async def submitter(tag: str) -> None:
                for b in range(batches):
                    events = [
                        ChannelEvent("api", f"{tag}-{b}-{i}", {"n": i, "task": "bench"})
                        for i in range(1000)
                    ]
                    await submit_many(db, PROJECT, events)

            started = time.perf_counter()
            await asyncio.gather(
                *(
                    submitter(f"sm{submitters}-{s}-{uuid.uuid4().hex[:6]}")
                    for s in range(submitters)
                )
            )
            elapsed = time.perf_counter() - started
            out[f"events_per_s_{submitters}_submitter{'s' if submitters > 1 else ''}"] = round(
                submitters * batches * 1000 / elapsed, 1
            )
        return out
    finally:
        await db.close()


# A dead window (six weeks back, every row expired) of $1 rows, beside $1 / 2 live rows in the
# current window: what the dedupe_expiry loop finds once a week.
FILL_DEAD = """
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, window_start, run_id, created_at, expires_at)
SELECT 'x' || (g % 13), 'api', 'dead-' || g, awooop_dedupe_window(now()) - interval '42 days',
       gen_random_uuid(), now() - interval '42 days', now() - interval '35 days'
FROM generate_series(1, $1::bigint) AS g
"""
FILL_LIVE = """
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, window_start, run_id, created_at, expires_at)
SELECT 'x' || (g % 13), 'api', 'live-' || g, awooop_dedupe_window(now()), gen_random_uuid(),
       now(), now() + interval '7 days'
FROM generate_series(1, $1::bigint / 2) AS g
"""
OLD_WINDOWS = "SELECT awooop_ensure_dedupe_partitions(now() - interval '49 days', now())"
WAL_LSN = "SELECT pg_current_wal_lsn()::text"
WAL_BYTES = "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint"


async def bench_expiry(url: str, sizes: list[int]) -> list[dict[str, Any]]:
    """One dedupe_expiry pass that drops a dead window of ``size`` rows: its time and WAL."""
    conn = await asyncpg.connect(url)
    results = []
    try:
        for size in sizes:
            await conn.execute("TRUNCATE awooop_channel_event_dedupe")
            await conn.execute(OLD_WINDOWS)
            await conn.execute(FILL_DEAD, size)
            await conn.execute(FILL_LIVE, size)
            await conn.execute("VACUUM ANALYZE awooop_channel_event_dedupe")
            await conn.execute("CHECKPOINT")
            now = await conn.fetchval("SELECT now()")
            parts = [windows.Window(r[0], r[1], r[2]) for r in await conn.fetch(windows.LIST)]
            before = await conn.fetchval(WAL_LSN)
            started = time.perf_counter()
            dropped = await windows.drop_dead(url, now, timedelta(days=7), parts)
            elapsed_ms = (time.perf_counter() - started) * 1000
            wal = await conn.fetchval(WAL_BYTES, await conn.fetchval(WAL_LSN), before)
            live = await conn.fetchval("SELECT count(*) FROM awooop_channel_event_dedupe")
            results.append(
                {
                    "dead_rows": size,
                    "rows_dropped": dropped,
                    "live_rows_after": live,
                    "pass_ms": round(elapsed_ms, 1),
                    "wal_bytes": wal,
                }
            )
            print(f"  expiry: {results[-1]}", file=sys.stderr)
    finally:
        await conn.close()
    return results


PGBENCH_SCRIPT = """\\set k random(1, 10000000)
INSERT INTO kv VALUES (:k, 1) ON CONFLICT (k) DO UPDATE SET v = kv.v + 1;
"""


def bench_pgbench(server: str, duration: float) -> dict[str, Any]:
    name = f"awooop_pgbench_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(server)
    base = ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432)]
    base += ["-U", parts.username or "postgres"]
    subprocess.run(["createdb", *base, name], check=True, capture_output=True)
    try:
        subprocess.run(
            ["psql", *base, "-q", "-d", name, "-c", "CREATE TABLE kv (k int PRIMARY KEY, v int)"],
            check=True,
            capture_output=True,
        )
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
            script.write(PGBENCH_SCRIPT)
        out: dict[str, Any] = {"statement": "INSERT ... ON CONFLICT (k) DO UPDATE (prepared)"}
        for clients in (1, 8):
            result = subprocess.run(
                [
                    "pgbench",
                    *base,
                    "-n",
                    "-M",
                    "prepared",
                    "-c",
                    str(clients),
                    "-j",
                    str(min(clients, 2)),
                    "-T",
                    str(int(duration)),
                    "-f",
                    script.name,
                    name,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            tps = re.search(r"tps = ([\d.]+)", result.stdout)
            out[f"tps_{clients}_clients"] = float(tps.group(1)) if tps else None
            print(f"  pgbench clients={clients}: {out[f'tps_{clients}_clients']}", file=sys.stderr)
        os.unlink(script.name)
        return out
    finally:
        subprocess.run(["dropdb", *base, "--force", name], check=False, capture_output=True)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = server_url()
    name = f"awooop_bench_{uuid.uuid4().hex[:8]}"
    url = with_database(server, name)
    report: dict[str, Any] = {
        "benchmark": "ingest",
        "machine": {"cpus": os.cpu_count(), "note": "shared machine: rough figures"},
        "duration_s": args.duration,
    }
    await migrate(url)
    try:
        db = await Database.open(url, max_size=2)
        try:
            _, token = await credentials.create_token(db, PROJECT, "api")
        finally:
            await db.close()
        clients = [int(c) for c in args.clients.split(",")]
        workers = [int(w) for w in args.workers.split(",")]
        parts = set(args.parts.split(","))
        if "pgbench" in parts:
            report["pgbench"] = await asyncio.to_thread(bench_pgbench, server, args.duration)
        if "http" in parts:
            report["http"], report["duplicates"] = await asyncio.to_thread(
                bench_http, url, token, clients, workers, args.duration
            )
        if "submit_many" in parts:
            report["submit_many"] = await bench_submit_many(url, args.batches)
            print(f"  submit_many: {report['submit_many']}", file=sys.stderr)
        if "expiry" in parts:
            sizes = [s for s in (10_000, 100_000, 1_000_000) if s <= args.expiry_rows]
            report["expiry"] = await bench_expiry(url, sizes)
    finally:
        admin = await asyncpg.connect(with_database(server, "postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    return report


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "loadgen":
        import uvloop

        port, token, clients, duration, keys, prefix = sys.argv[2:8]
        result = uvloop.run(load(int(port), token, int(clients), float(duration), keys, prefix))
        print(json.dumps(result))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per HTTP phase")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--workers", default="1,2", help="awooop serve process counts to try")
    parser.add_argument("--batches", type=int, default=20, help="submit_many batches of 1,000")
    parser.add_argument("--expiry-rows", type=int, default=1_000_000)
    parser.add_argument(
        "--parts", default="pgbench,http,submit_many,expiry", help="which parts to run"
    )
    parser.add_argument("--out", help="also write the JSON here")
    arguments = parser.parse_args()
    document = json.dumps(asyncio.run(main(arguments)), indent=2)
    print(document)
    if arguments.out:
        Path(arguments.out).write_text(document + "\n")
