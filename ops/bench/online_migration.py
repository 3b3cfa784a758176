"""Benchmark: an online migration on a large event log, under live readers and writers, against
the same change run the old way (one plain transaction).

    .venv/bin/python ops/bench/online_migration.py [--events 10000000] [--days 28]
        [--changes validate,index] [--rate 50] [--baseline-s 10] [--hold-s 5] [--keep]
        [--out FILE]

In a scratch database on AWOOOP_BENCH_PG_URL (default: the local server), migrated up to but
not including 0126, it writes ``--events`` events into ``awooop_events`` with INSERT ... SELECT
generate_series in chunks of CHUNK_RUNS runs (one transaction each): 4 events per run stream
(versions 1-4, ``run-<uuid>`` names of 20 projects, each with its head in
``awooop_event_streams``), ``recorded_at`` spread over the past ``--days`` days, so the rows
land in several weekly partitions (created first). Then VACUUM ANALYZE and CHECKPOINT.

While each change runs, two writers append new run streams with the log's own append statement
(``awooop/eventlog/sql/append.sql``) and two readers read a stream (eventlog.read_stream) and follow
the log (eventlog.read_forward), each at ``--rate`` operations per second on a fixed schedule
(a blocked operation shows as one long latency, not as fewer operations). The changes:

- ``validate``: migrations/0126 (VALIDATE CONSTRAINT awooop_events_stream_of_project), online
  (awooop.core.online_migrations, partition by partition), then, with the constraint put back
  NOT VALID, the old way: the same statement in one transaction;
- ``index``: ``CREATE INDEX CONCURRENTLY ... ON awooop_events (event_type, position)`` online
  (ON ONLY the parent, one CONCURRENTLY build per partition, attached), then dropped and built
  the old way: CREATE INDEX in one transaction. Each starts while a long writer (a transaction
  that appended an event) stays open ``--hold-s`` seconds: the index's lock on the parent
  conflicts with it, and writers queue behind a waiting request. Online, the request gives up
  after lock_timeout and is retried; the old way waits, and so does every writer after it.

Reported per change and way: seconds, rows/s, the load's longest operation and p99 latency
(reads and writes apart), and for the online way the lock_timeout retries and the longest lock
wait of the migrator; ``baseline`` is the same load with no change running. One JSON object on
stdout (and in ``--out``); progress on stderr. The scratch database is dropped unless --keep.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from awooop.core.logs import configure_logging
from awooop.core.migrate import MIGRATIONS_DIR, migrate
from awooop.core.online_migrations import apply_online
from awooop.eventlog import eventlog, queries

SERVER = os.environ.get("AWOOOP_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
ONLINE_FILE = "0126_validate_log_stream_names.sql"
CONSTRAINT = "awooop_events_stream_of_project"
EVENTS_PER_RUN = 4
CHUNK_RUNS = 50_000
PROJECTS = 20
PARTITIONS = "SELECT awooop_ensure_log_partitions(now() - make_interval(days => $1), now(), 7)"
# One chunk: runs $1..$2 of $3, their heads and 4 events each, spread over $4 days back.
FILL_HEADS = """
INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
SELECT 'run-' || md5('bench' || n)::uuid, 'p' || (n % 20), 4, pg_current_xact_id()
FROM generate_series($1::bigint, $2::bigint) AS n
"""
FILL_EVENTS = """
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data,
                           recorded_at)
SELECT gen_random_uuid(), 'run-' || md5('bench' || n)::uuid, v, 'p' || (n % 20),
       (ARRAY['RunCreated', 'RunClaimed', 'StepCompleted', 'RunCompleted'])[v],
       jsonb_build_object('step', v, 'note', 'a bench event of a few dozen bytes'),
       now() - make_interval(days => $4) * (1 - n::float8 / $3)
FROM generate_series($1::bigint, $2::bigint) AS n, generate_series(1, 4) AS v
"""
NOT_VALID_AGAIN = (
    f"ALTER TABLE awooop_events DROP CONSTRAINT {CONSTRAINT}",
    f"ALTER TABLE awooop_events ADD CONSTRAINT {CONSTRAINT} "
    "CHECK (awooop_stream_of_project(stream_id, project_id)) NOT VALID",
)
INDEX = "awooop_events_bench_type_idx"
INDEX_ONLINE = (
    f"-- awooop: online\nCREATE INDEX CONCURRENTLY {INDEX} ON awooop_events (event_type, position)"
)
INDEX_PLAIN = f"CREATE INDEX {INDEX} ON awooop_events (event_type, position)"
TAIL = """
SELECT tx_id::text::bigint AS tx_id, position FROM awooop_events
ORDER BY awooop_events.tx_id DESC, position DESC LIMIT 1  -- the column: index order
"""
APPEND = queries.load("append")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Latencies:
    reads: list[float] = field(default_factory=list)
    writes: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"errors": len(self.errors)}
        for name, values in (("read", self.reads), ("write", self.writes)):
            ordered = sorted(values) or [0.0]
            out[f"{name}_ops"] = len(values)
            out[f"{name}_max_ms"] = round(ordered[-1] * 1000, 1)
            out[f"{name}_p99_ms"] = round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 1)
            out[f"{name}_median_ms"] = round(statistics.median(ordered) * 1000, 2)
        return out


class Load:
    """Two writers and two readers on fixed schedules until stopped."""

    def __init__(self, url: str, rate: float, runs: int) -> None:
        self.url, self.interval, self.runs = url, 1.0 / rate, runs
        self.stop = asyncio.Event()
        self.latencies = Latencies()
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.stop.clear()
        self.latencies = Latencies()
        for worker in (self._writer, self._writer, self._reader, self._reader):
            conn = await asyncpg.connect(self.url)
            self.tasks.append(asyncio.create_task(self._run(conn, worker)))

    async def finish(self) -> Latencies:
        self.stop.set()
        await asyncio.gather(*self.tasks)
        self.tasks = []
        return self.latencies

    async def _run(self, conn: Any, worker: Any) -> None:
        try:
            await worker(conn)
        finally:
            await conn.close()

    async def _scheduled(self, op: Any, into: list[float]) -> None:
        next_at = time.monotonic()
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                await op()
            except asyncpg.PostgresError as exc:
                self.latencies.errors.append(repr(exc))
            into.append(time.monotonic() - began)
            next_at = max(next_at + self.interval, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())

    async def _writer(self, conn: Any) -> None:
        async def op() -> None:
            run = f"run-{uuid.uuid4()}"
            await conn.fetch(APPEND, run, "p1", 0, [uuid.uuid4()], ["RunCreated"], ["{}"], ["{}"])

        await self._scheduled(op, self.latencies.writes)

    async def _reader(self, conn: Any) -> None:
        began = time.monotonic()
        tail = await conn.fetchrow(TAIL)
        self.latencies.reads.append(time.monotonic() - began)
        cursor = eventlog.Cursor(tail["tx_id"], tail["position"])

        async def op() -> None:
            nonlocal cursor
            n = random.randrange(1, self.runs + 1)
            await eventlog.read_stream(conn, f"run-{uuid.UUID(bytes=_md5(f'bench{n}'))}")
            cursor = eventlog.advance(cursor, await eventlog.read_forward(conn, cursor, 100))

        await self._scheduled(op, self.latencies.reads)


def _md5(text: str) -> bytes:
    return hashlib.md5(text.encode()).digest()  # noqa: S324 - the fill's names, not security


async def fill(conn: Any, events: int, days: int) -> None:
    runs = events // EVENTS_PER_RUN
    await conn.execute(PARTITIONS, days + 1)
    started = time.monotonic()
    for first in range(1, runs + 1, CHUNK_RUNS):
        last = min(runs, first + CHUNK_RUNS - 1)
        async with conn.transaction():
            await conn.execute(FILL_HEADS, first, last)
            await conn.execute(FILL_EVENTS, first, last, runs, days)
        done = last * EVENTS_PER_RUN
        log(f"filled {done:,} events ({done / (time.monotonic() - started):,.0f}/s)")
    log("VACUUM ANALYZE, CHECKPOINT")
    await conn.execute("VACUUM ANALYZE awooop_events")
    await conn.execute("VACUUM ANALYZE awooop_event_streams")
    await conn.execute("CHECKPOINT")


async def long_writer(url: str, hold_s: float, holding: asyncio.Event) -> None:
    """A transaction that appends an event and stays open ``hold_s``: a batch import, say."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            stream = f"run-{uuid.uuid4()}"
            await conn.fetch(
                APPEND, stream, "p1", 0, [uuid.uuid4()], ["RunCreated"], ["{}"], ["{}"]
            )
            holding.set()
            await asyncio.sleep(hold_s)
    finally:
        await conn.close()


async def measured(
    load: Load, change: Any, hold: tuple[str, float] | None = None
) -> dict[str, Any]:
    await load.start()
    await asyncio.sleep(1.0)  # the load is on its schedule before the change starts
    holder = None
    if hold is not None:
        holding = asyncio.Event()
        holder = asyncio.create_task(long_writer(hold[0], hold[1], holding))
        await holding.wait()
    began = time.monotonic()
    extra = await change()
    seconds = time.monotonic() - began
    if holder is not None:
        await holder
    await asyncio.sleep(1.0)
    return {"seconds": round(seconds, 2), **(extra or {}), "load": (await load.finish()).summary()}


async def online(conn: Any, name: str, sql: str, rows: int) -> dict[str, Any]:
    report = await apply_online(conn, name, sql)
    return {
        "rows_per_s": round(rows / report.seconds) if report.seconds else None,
        "lock_timeout_retries": report.retries,
        "retry_errors": sorted(set(report.retry_errors)),
        "migrator_longest_lock_wait_s": round(report.longest_lock_wait_s, 3),
    }


async def plain(conn: Any, sql: str, rows: int) -> dict[str, Any]:
    began = time.monotonic()
    async with conn.transaction():
        await conn.execute(sql)
    return {"rows_per_s": round(rows / (time.monotonic() - began))}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    name = f"awooop_bench_online_{uuid.uuid4().hex[:8]}"
    url = SERVER.rsplit("/", 1)[0] + "/" + name
    files = Path(tempfile.mkdtemp(prefix="awooop-online-bench-"))
    for path in MIGRATIONS_DIR.iterdir():
        if path.name != ONLINE_FILE:
            shutil.copy(path, files / path.name)
    result: dict[str, Any] = {"events": args.events, "rate_per_worker": args.rate}
    try:
        await migrate(url, files)
        conn = await asyncpg.connect(url)
        try:
            await fill(conn, args.events, args.days)
            rows = await conn.fetchval("SELECT count(*) FROM awooop_events")
            result["partitions"] = await conn.fetchval("SELECT count(*) FROM awooop_log_partitions")
            result["log_size_mb"] = round(
                await conn.fetchval(
                    "SELECT sum(pg_table_size(partition_name::regclass)) FROM awooop_log_partitions"
                )
                / 2**20
            )
            load = Load(url, args.rate, args.events // EVENTS_PER_RUN)
            log("baseline load")
            result["baseline"] = await measured(load, lambda: asyncio.sleep(args.baseline_s))
            changes = [c for c in args.changes.split(",") if c]
            if "validate" in changes:
                sql = (MIGRATIONS_DIR / ONLINE_FILE).read_text()
                # The rows predate the CHECK, as in a log written before 0115: partitions
                # created since were made with it (LIKE ... INCLUDING CONSTRAINTS), valid.
                for statement in NOT_VALID_AGAIN:
                    await conn.execute(statement)
                log("validate: online")
                on = await measured(load, lambda: online(conn, ONLINE_FILE, sql, rows))
                for statement in NOT_VALID_AGAIN:
                    await conn.execute(statement)
                log("validate: one plain transaction")
                old = await measured(
                    load,
                    lambda: plain(
                        conn, f"ALTER TABLE awooop_events VALIDATE CONSTRAINT {CONSTRAINT}", rows
                    ),
                )
                result["validate"] = {"online": on, "plain_transaction": old}
            if "index" in changes:
                hold = (url, args.hold_s) if args.hold_s > 0 else None
                log("index: online")
                on = await measured(
                    load, lambda: online(conn, "bench_index.sql", INDEX_ONLINE, rows), hold
                )
                await conn.execute(f"DROP INDEX {INDEX}")
                log("index: one plain transaction")
                old = await measured(load, lambda: plain(conn, INDEX_PLAIN, rows), hold)
                result["index"] = {
                    "long_writer_s": args.hold_s,
                    "online": on,
                    "plain_transaction": old,
                }
        finally:
            await conn.close()
    finally:
        shutil.rmtree(files, ignore_errors=True)
        if not args.keep:
            admin = await asyncpg.connect(SERVER)
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()
        else:
            result["database"] = name
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--changes", default="validate,index")
    parser.add_argument("--rate", type=float, default=50.0, help="operations/s per worker")
    parser.add_argument("--baseline-s", type=float, default=10.0)
    parser.add_argument("--hold-s", type=float, default=5.0, help="index: long writer's time")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    configure_logging("info")
    result = asyncio.run(bench(args))
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
