"""Flat cost as the log grows: the write path, the relay's read and
``replay run_state --verify`` with 0, 10 million and 50 million events already in the log.

    .venv/bin/python ops/bench/growth.py [--sizes 0,10M,50M] [--rounds 10] [--ops 200] [--reads N]
                                         [--projects 20] [--days 30] [--load-workers 2]
                                         [--full-verify-max 10M] [--cluster DIR] [--keep]
                                         [--out FILE]

Prints one JSON document (progress goes to stderr) and writes it to ``--out`` (default
``ops/bench/results/growth-<date>.json``).

**Servers.** A private PostgreSQL cluster on a loopback port (``awooop.demo.servers``), fsync
on, ``shared_buffers`` 2 GB, autovacuum on: nobody else's transactions hold the relay's horizon
back and every Postgres process is the benchmark's, so its CPU can be read from /proc. Two
databases, both migrated by ``awooop.core.migrate.migrate``: ``awooop_growth`` (the log that
grows) and ``awooop_growth_control`` (an empty log, measured in the same rounds: on a shared
machine, ``same_round_ratio`` = big ÷ control of the same rounds separates growth from load).
``--cluster DIR`` keeps the cluster in DIR and resumes from what DIR already holds (a rerun
pays no generation); ``--keep`` leaves it there at the end, else it is deleted.

**The old log.** Sizes grow in one database (0 → 10M → 50M: generation is paid once); each
step writes ``size - loaded`` events with COPY (text format) through the parent tables, in
transactions of ``CHUNK_RUNS`` runs, from ``--load-workers`` processes. Every run is a valid
COMPLETED history: RunCreated, RunClaimed, 0-2 StepCompleted (4 events per run on average),
RunCompleted, with its stream head (``awooop_event_streams``), its run-state row (checked
against ``apply`` folded over its events for the first three runs of every chunk) and its
dedupe rows in its window and the next, as ingest claims them (``expires_at`` = created + the
7-day TTL: the runs older than a week are expired, most of them, and no expiry loop runs:
every window stays), over ``--projects`` projects and 5 channel types, ``recorded_at``
spread over the past ``--days`` days (each load step spreads its runs over the whole window,
in order). Nothing is disabled: indexes, row-level security, the statement-level triggers
(NOTIFY, project registration; none is per row, so ``session_replication_role`` is left
alone). The log's partitions (migration 0100) are created over the load's whole range before
the COPY. Run ids are time-ordered like ingest's (UUIDv7, counting up with the run's index).
After each load: VACUUM ANALYZE, CHECKPOINT.

**Operations** (each round: the big and the control database, their order alternating;
``--ops`` runs per database per round, ONE AT A TIME, on a fresh tail of runs):

- ``ingest``: ``producer.submit(db, ...)``, the library's own transaction (one tenant-session
  statement), a new run;
- ``claim``: the worker's ``RunStatements.claim_many([run_id], ...)`` (``claim_many.sql``, one
  statement) of that run;
- ``complete``: ``RunStatements.complete_many([Completion(...)])`` (``complete_many.sql``);
- ``relay_read``: ``eventlog.read_forward_and_held`` (READ_FORWARD_AND_HELD, limit
  ``relay_batch_size``) on the relay's connection (platform role, cached plans) from a cursor
  ``RELAY_LAG`` events behind the tail, ``--ops`` times; ``relay_read_at_head`` the same
  from the newest event (nothing new: the read at an idle wake-up).

Per operation: the median latency (client side, ms) over every sample of every round, the
medians of each round, and Postgres CPU per operation (utime + stime of every process of the
private cluster, from /proc, over the phase, ÷ operations). Ratios: each size's median ÷ the
first size's, and ``same_round_ratio`` (big ÷ control, medians of the same rounds).

**Replay.** ``replay run_state --verify`` has no tail option (it rebuilds the whole
projection, or one project with ``--project``): per size, ``Replay(...).run(verify=True)`` with
``project=growth-0`` (one project of ``--projects``: its whole history, tail included) and,
up to ``--full-verify-max`` events, the whole log (2 bulk workers). Both are reported with
their seconds and differences (0 expected: it also checks the generator); neither is flat.

Disk: before each load the free space is checked against the estimate per event measured
so far (the load refuses to start when it would leave less than ``DISK_MARGIN_GB``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from awooop.core import events as ev  # noqa: E402
from awooop.core.config import Settings, load_settings  # noqa: E402
from awooop.core.db import Database  # noqa: E402
from awooop.core.events import run_stream_id  # noqa: E402
from awooop.core.logs import configure_logging  # noqa: E402
from awooop.core.migrate import migrate  # noqa: E402
from awooop.core.pools import PLATFORM_ROLE, connect  # noqa: E402
from awooop.demo.servers import PostgresServer  # noqa: E402
from awooop.eventlog import eventlog  # noqa: E402
from awooop.eventlog.state import RunState, fold  # noqa: E402
from awooop.producer import ChannelEvent, submit  # noqa: E402
from awooop.runs.leases import RunStatements  # noqa: E402
from awooop.runs.leases.rules import Completion  # noqa: E402

BIG = "awooop_growth"
CONTROL = "awooop_growth_control"
CHANNELS = ("api", "telegram", "gitea", "alertmanager", "line")
CHUNK_RUNS = 25_000  # runs per COPY transaction (about 100,000 events)
RELAY_LAG = 100  # events between the relay's cursor and the tail's end
DISK_MARGIN_GB = 8.0
DEDUPE_TTL = timedelta(days=7)
PG_OPTIONS = (
    "-c fsync=on -c shared_buffers=2GB -c max_wal_size=8GB -c checkpoint_timeout=15min "
    "-c maintenance_work_mem=512MB -c work_mem=16MB"
)
OPS: tuple[str, ...] = ("ingest", "claim", "complete", "relay_read", "relay_read_at_head")
OPS += ("relay_read_jit_off", "relay_read_at_head_jit_off")
STATE_FILE = "growth-state.json"
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


# --- pure parts (tests/unit/test_bench_growth.py) ----------------------------------------------


def parse_size(text: str) -> int:
    """``0``, ``250000``, ``500k``, ``10M``, ``1.5M``, ``1G`` (10^3 steps) as a number of events."""
    text = text.strip().replace("_", "")
    if not text:
        raise ValueError("empty size")
    factor = {"k": 10**3, "m": 10**6, "g": 10**9}.get(text[-1].lower())
    number = text[:-1] if factor else text
    value = float(number) * (factor or 1)
    if value < 0 or value != int(value):
        raise ValueError(f"not a whole, non-negative number of events: {text!r}")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes, strictly increasing (the log only grows)."""
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise ValueError("no size given")
    if any(b <= a for a, b in itertools.pairwise(sizes)):
        raise ValueError(f"sizes must increase: {text!r}")
    return sizes


def size_label(size: int) -> str:
    """``0``, ``500k``, ``10M``, ``1.5M``: the inverse of :func:`parse_size` for round sizes."""
    for suffix, factor in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if size >= factor and (size * 10) % factor == 0:
            return f"{size / factor:g}{suffix}"
    return str(size)


def ratios(medians: dict[str, float | None], base: str) -> dict[str, float | None]:
    """Each label's value ÷ the ``base`` label's (None where either is missing or 0)."""
    reference = medians.get(base)
    return {
        label: round(value / reference, 3) if value is not None and reference else None
        for label, value in medians.items()
        if label != base
    }


def median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def runs_for(events: int) -> int:
    """Runs whose histories hold about ``events`` events: run ``i`` has ``3 + i % 3``
    (created, claimed, ``i % 3`` steps, completed): 4 on average."""
    return round(events / 4)


def events_of_runs(first: int, count: int) -> int:
    """The exact number of events of runs ``first`` .. ``first + count - 1``."""
    return sum(3 + i % 3 for i in range(first, first + count))


# --- the old log: runs generated as COPY text ---------------------------------------------

RUN_STATE_COLUMNS = tuple(f.name for f in msgspec.structs.fields(RunState))
# Every column of the log but the two the database fills (position, tx_id), in its order.
EVENT_COLUMNS = tuple(
    f for f in eventlog.RecordedEvent.__struct_fields__ if f not in ("position", "tx_id")
)
STREAM_COLUMNS = ("stream_id", "project_id", "version", "last_tx_id", "updated_at")
DEDUPE_COLUMNS: tuple[str, ...] = (
    "project_id",
    "channel_type",
    "provider_event_id",
    "window_start",
    "run_id",
    "created_at",
)
DEDUPE_COLUMNS += ("expires_at",)
TTL_US = int(DEDUPE_TTL.total_seconds() * 1_000_000)
# awooop_dedupe_window() (migration 0112): 7-day bins from Monday 2000-01-03 UTC. A run's key
# is claimed in its window and the next, as ingest claims it.
WINDOW_ORIGIN_US = int(datetime(2000, 1, 3, tzinfo=UTC).timestamp() * 1_000_000)
WINDOW_US = 7 * 86_400 * 1_000_000


def dedupe_window_us(at_us: int) -> int:
    return WINDOW_ORIGIN_US + (at_us - WINDOW_ORIGIN_US) // WINDOW_US * WINDOW_US


class Clock:
    """Microseconds since the epoch as ISO 8601 text, fast (the minute's prefix is cached)."""

    def __init__(self) -> None:
        self.minute = -1
        self.prefix = ""

    def text(self, us: int, zone: str) -> str:
        minute, rest = divmod(us, 60_000_000)
        if minute != self.minute:
            self.minute = minute
            stamp = datetime.fromtimestamp(minute * 60, UTC)
            self.prefix = stamp.strftime("%Y-%m-%dT%H:%M:")
        seconds, micro = divmod(rest, 1_000_000)
        return f"{self.prefix}{seconds:02d}.{micro:06d}{zone}"


# Generated runs get time-ordered ids, as ingest gives (awooop.core.ids.uuid7): the first 48
# bits count up with the run's index from a fixed instant long past (so a resumed load makes
# the same ids, and every live run's id sorts after them), the rest is the run's random bits.
ID_EPOCH_MS = 1_700_000_000_000


def _uuid(bits: int, index: int) -> str:
    value = ((ID_EPOCH_MS + index) << 80) | (0x7 << 76) | (bits & ((1 << 76) - 1))
    value = (value & ~(0b11 << 62)) | (0b10 << 62)  # the RFC 4122 variant
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def fast_run(
    rng: random.Random, clock: Clock, index: int, projects: int, at_us: int
) -> tuple[list[str], str, str, str]:
    """Run ``index``'s COPY lines: its events (created, claimed, ``index % 3`` steps,
    completed), its stream head (``last_tx_id`` a placeholder: the COPY's own transaction
    id), its run-state row (COMPLETED) and its dedupe row."""
    run_id = _uuid(rng.getrandbits(128), index)
    stream = run_stream_id(run_id)
    project = f"growth-{index % projects}"
    channel = CHANNELS[index % len(CHANNELS)]
    worker = f"worker-{index % 16}"
    key = f"{channel}-{run_id[:8]}{run_id[9:13]}{run_id[14:18]}{run_id[19:23]}"
    payload = (
        f'{{"text":"deploy service-{index % 997} to production, ticket OPS-{index % 100_000}",'
        f'"chat":{{"id":{1_000_000 + index % 50_000},"type":"group"}},"n":{index}}}'
    )
    steps = index % 3
    claimed_us = at_us + 4_000
    done_us = at_us + 20_000 * steps + 30_000
    z = clock.text
    at_z, done_z = z(at_us, "Z"), z(done_us, "Z")
    data = [
        (
            "RunCreated",
            f'{{"type":"RunCreated","at":"{at_z}","run_id":"{run_id}","project_id":"{project}",'
            f'"channel_type":"{channel}","provider_event_id":"{key}","input":{payload},'
            f'"max_attempts":3,"contract_id":"default"}}',
            at_us,
        ),
        (
            "RunClaimed",
            f'{{"type":"RunClaimed","at":"{z(claimed_us, "Z")}","worker_id":"{worker}",'
            f'"attempt":1,"lease_until":"{z(claimed_us + 30_000_000, "Z")}"}}',
            claimed_us,
        ),
    ]
    saga = []
    for step in range(steps):
        step_us = at_us + 20_000 * (step + 1)
        result = f'{{"ok":true,"step":{step}}}'
        data.append(
            (
                "StepCompleted",
                f'{{"type":"StepCompleted","at":"{z(step_us, "Z")}","worker_id":"{worker}",'
                f'"attempt":1,"step":"step-{step}","result":{result}}}',
                step_us,
            )
        )
        saga.append(f'"step-{step}":{{"attempt":1,"result":{result}}}')
    data.append(
        (
            "RunCompleted",
            f'{{"type":"RunCompleted","at":"{done_z}","worker_id":"{worker}","attempt":1,'
            f'"result":{{"ok":true}}}}',
            done_us,
        )
    )
    meta = f'{{"traceparent": "00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"}}'
    events = [
        f"{uuid.UUID(int=rng.getrandbits(128), version=4)}\t{stream}\t{version}\t{project}"
        f"\t{name}\t{json_text}\t{meta}\t{z(us, '+00:00')}\n"
        for version, (name, json_text, us) in enumerate(data, start=1)
    ]
    at_c, done_c = z(at_us, "+00:00"), z(done_us, "+00:00")
    head = f"{stream}\t{project}\t{len(data)}\tTXID\t{done_c}\n"
    state = (
        f"{run_id}\t{project}\t{channel}\t{key}\tdefault\tCOMPLETED\t{len(data)}\t1\t3"
        f"\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t{{{','.join(saga)}}}\t{payload}"
        f'\t{{"ok":true}}\t\\N\t\\N\t{at_c}\t{done_c}\t{done_c}\t\\N'
        "\t\\N\t\\N\t\\N\t\\N\tFalse\n"  # no concurrency key, no parent
    )
    window = dedupe_window_us(at_us)
    dedupe = "".join(
        f"{project}\t{channel}\t{key}\t{z(w, '+00:00')}\t{run_id}\t{at_c}"
        f"\t{z(at_us + TTL_US, '+00:00')}\n"
        for w in (window, window + WINDOW_US)
    )
    return events, head, state, dedupe


def _cell(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return str(value)


def check_run(events: list[str], state_line: str) -> None:
    """The generated run agrees with the runtime: its events decode as the runtime's types
    and ``apply`` folded over them gives exactly the generated run-state row."""
    decoded = [ev.decode_event(line.split("\t")[5]) for line in events]
    state = fold(list(decoded))
    assert state is not None
    expected = "\t".join(_cell(getattr(state, c)) for c in RUN_STATE_COLUMNS) + "\n"
    if expected != state_line:
        raise AssertionError(f"generated run state differs from apply():\n{state_line}{expected}")


def chunk_text(
    first: int, count: int, total: int, projects: int, window: tuple[datetime, datetime], seed: int
) -> tuple[list[str], list[str], list[str], list[str], int]:
    """COPY lines for runs ``first`` .. ``first + count - 1`` of a load of runs up to
    ``total`` whose creation times are spread, in order, over ``window``: events, stream
    heads, run-state rows, dedupe rows, and the number of events. The first three runs
    are checked against ``apply`` (:func:`check_run`)."""
    rng = random.Random(seed * 1_000_003 + first)
    clock = Clock()
    start = int(window[0].timestamp() * 1_000_000)
    span = int((window[1] - window[0]).total_seconds() * 1_000_000)
    events: list[str] = []
    streams: list[str] = []
    states: list[str] = []
    dedupe: list[str] = []
    for index in range(first, first + count):
        at_us = start + span * index // max(1, total)
        lines, head, state, key = fast_run(rng, clock, index, projects, at_us)
        if index < first + 3:  # one run of each shape (0, 1 and 2 steps)
            check_run(lines, state)
        events.extend(lines)
        streams.append(head)
        states.append(state)
        dedupe.append(key)
    return events, streams, states, dedupe, len(events)


PARTITIONED = (
    "SELECT to_regprocedure('awooop_ensure_log_partitions(timestamptz,timestamptz,int)')"
    " IS NOT NULL"
)


async def copy_chunk(conn: Any, lines: tuple[list[str], list[str], list[str], list[str]]) -> None:
    events, streams, states, dedupe = lines
    async with conn.transaction():
        tx_id = await conn.fetchval("SELECT pg_current_xact_id()::text")
        heads = "".join(streams).replace("\tTXID\t", f"\t{tx_id}\t")
        for table, columns, text in (
            ("awooop_channel_event_dedupe", DEDUPE_COLUMNS, "".join(dedupe)),
            ("awooop_run_state", RUN_STATE_COLUMNS, "".join(states)),
            ("awooop_event_streams", STREAM_COLUMNS, heads),
            ("awooop_events", EVENT_COLUMNS, "".join(events)),
        ):
            await conn.copy_to_table(table, source=io.BytesIO(text.encode()), columns=list(columns))


async def chunk_loaded(conn: Any, first: int, seed: int) -> bool:
    """Whether the chunk that starts at run ``first`` was committed (its first run exists)."""
    run_id = _uuid(random.Random(seed * 1_000_003 + first).getrandbits(128), first)
    found = await conn.fetchval("SELECT 1 FROM awooop_run_state WHERE run_id = $1::uuid", run_id)
    return found is not None


def load_part(
    url: str,
    part: int,
    parts: int,
    first_run: int,
    runs: int,
    projects: int,
    window: tuple[datetime, datetime],
    seed: int,
) -> int:
    """One loader process: chunks ``part``, ``part + parts``, ... of the load (so that the
    processes write neighbouring times at once and positions follow time roughly)."""

    async def go() -> int:
        conn = await connect(url)
        written = 0
        try:
            for start in range(part * CHUNK_RUNS, runs, parts * CHUNK_RUNS):
                count = min(CHUNK_RUNS, runs - start)
                if await chunk_loaded(conn, first_run + start, seed):
                    continue  # an interrupted load, resumed: each chunk is one transaction
                *lines, n = chunk_text(
                    first_run + start, count, first_run + runs, projects, window, seed
                )
                await copy_chunk(conn, (lines[0], lines[1], lines[2], lines[3]))
                written += n
        finally:
            await conn.close()
        return written

    return asyncio.run(go())


async def load(
    url: str, loaded_runs: int, runs: int, projects: int, days: float, workers: int, seed: int
) -> dict[str, Any]:
    """Append ``runs`` generated runs (run indexes after ``loaded_runs``) to the log."""
    now = datetime.now(UTC)
    window = (now - timedelta(days=days), now - timedelta(minutes=10))
    conn = await connect(url)
    try:
        partitioned = await conn.fetchval(PARTITIONED)
        if partitioned:  # the log's weekly partitions over the load's window (migration 0100)
            await conn.execute(
                "SELECT awooop_ensure_log_partitions($1, $2, 7)",
                window[0] - timedelta(days=1),
                now + timedelta(days=14),
            )
            # The dedupe table's windows (migration 0112), the load's and two weeks ahead.
            await conn.execute(
                "SELECT awooop_ensure_dedupe_partitions($1, $2)",
                window[0] - timedelta(days=1),
                now + timedelta(days=14),
            )
    finally:
        await conn.close()
    started = time.monotonic()
    # Run indexes continue from the previous loads so that provider ids stay unique; the
    # window restarts at each load (see the docstring).
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(load_part, url, p, workers, loaded_runs, runs, projects, window, seed)
            for p in range(workers)
        ]
        events = sum(f.result() for f in futures)
    copy_s = time.monotonic() - started
    conn = await connect(url)
    try:
        vacuum_started = time.monotonic()
        await conn.execute("VACUUM ANALYZE")
        vacuum_s = time.monotonic() - vacuum_started
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    return {
        "runs": runs,
        "events": events,
        "copy_s": round(copy_s, 1),
        "vacuum_analyze_s": round(vacuum_s, 1),
        "events_per_s": round(events / copy_s) if copy_s else None,
        "partitions_function": bool(partitioned),
    }


# --- measuring ---------------------------------------------------------------------------


class ClusterCpu:
    """CPU ticks of every process of one PostgreSQL cluster (the postmaster and its children)."""

    def __init__(self, data_directory: Path) -> None:
        self.data = data_directory

    def ms(self) -> float:
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            if int(entry.name) == postmaster or int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
        return total * TICK_MS


class Target:
    """One database measured: its pools, the relay's connection, the tail being written."""

    def __init__(self, name: str, url: str, settings: Settings) -> None:
        self.name = name
        self.url = url
        self.settings = settings
        self.db: Database | None = None
        self.relay: Any = None
        self.relay_jit_off: Any = None
        self.statements: RunStatements | None = None
        self.counter = 0

    async def open(self) -> None:
        self.db = await Database.open(self.url, max_size=4, run_min_size=1)
        self.statements = RunStatements(self.db)
        self.relay = await connect(self.url, PLATFORM_ROLE, cached_plans=True)
        self.relay_jit_off = await connect(self.url, PLATFORM_ROLE, cached_plans=True)
        await self.relay_jit_off.execute("SET jit = off")

    async def close(self) -> None:
        for conn in (self.relay, self.relay_jit_off):
            if conn is not None:
                await conn.close()
        if self.db is not None:
            await self.db.close()


async def cursor_behind(conn: Any, lag: int) -> eventlog.Cursor:
    row = await conn.fetchrow(
        "SELECT tx_id::text::bigint AS tx_id, position FROM awooop_events "
        "ORDER BY tx_id DESC, position DESC OFFSET $1 LIMIT 1",
        lag,
    )
    return eventlog.Cursor(row["tx_id"], row["position"]) if row else eventlog.Cursor()


async def one_round(
    target: Target, ops: int, projects: int, cpu: ClusterCpu, reads: int | None = None
) -> dict[str, tuple[list[float], float, int]]:
    """``ops`` runs written one at a time (ingest, then claim, then complete), then the relay's
    reads: per operation its latencies (ms), Postgres CPU (ms) over the phase, operations."""
    assert target.db is not None and target.statements is not None
    settings, db, statements = target.settings, target.db, target.statements
    out: dict[str, tuple[list[float], float, int]] = {}
    worker = f"growth-worker-{uuid.uuid4().hex[:6]}"

    async def phase(name: str, calls: list[Any]) -> list[Any]:
        samples: list[float] = []
        results: list[Any] = []
        before = cpu.ms()
        for call in calls:
            started = time.perf_counter()
            results.append(await call())
            samples.append((time.perf_counter() - started) * 1000)
        out[name] = (samples, cpu.ms() - before, len(calls))
        return results

    def ingest_call(n: int) -> Any:
        project = f"growth-{n % projects}"
        event = ChannelEvent(
            CHANNELS[n % len(CHANNELS)], f"live-{uuid.uuid4().hex}", {"text": "live", "n": n}
        )
        return lambda: submit(db, project, event, settings=settings)

    numbers = range(target.counter, target.counter + ops)
    target.counter += ops
    submitted = await phase("ingest", [ingest_call(n) for n in numbers])
    run_ids = [s.run_id for s in submitted]

    def claim_call(run_id: uuid.UUID) -> Any:
        return lambda: statements.claim_many([run_id], worker, settings.lease_ttl_s)

    claims = await phase("claim", [claim_call(r) for r in run_ids])
    attempts = {}
    for batch in claims:
        for run_id, state in batch.claimed.items():
            attempts[run_id] = state.attempt_count
    if len(attempts) != len(run_ids):
        raise RuntimeError(f"{target.name}: {len(run_ids) - len(attempts)} runs not claimed")

    def complete_call(run_id: uuid.UUID) -> Any:
        done = Completion(run_id, worker, attempts[run_id], {"ok": True})
        return lambda: statements.complete_many([done])

    await phase("complete", [complete_call(r) for r in run_ids])
    relay = target.relay
    limit = settings.relay_batch_size
    reads = ops if reads is None else reads
    behind = await cursor_behind(relay, RELAY_LAG)
    head = await cursor_behind(relay, 0)

    def read_call(conn: Any, cursor: eventlog.Cursor) -> Any:
        return lambda: eventlog.read_forward_and_held(conn, cursor, limit)

    for suffix, conn in (("", relay), ("_jit_off", target.relay_jit_off)):
        batches = await phase(f"relay_read{suffix}", [read_call(conn, behind)] * reads)
        if any(len(b) != RELAY_LAG for b, _ in batches):
            raise RuntimeError(f"{target.name}: read {len(batches[0][0])} events, not {RELAY_LAG}")
        await phase(f"relay_read_at_head{suffix}", [read_call(conn, head)] * reads)
    return out


async def measure(
    targets: list[Target], rounds: int, ops: int, reads: int, projects: int, cpu: ClusterCpu
) -> dict[str, dict[str, Any]]:
    """``rounds`` rounds; in each, every target once (the order alternates)."""
    collected: dict[str, dict[str, list[Any]]] = {t.name: {op: [] for op in OPS} for t in targets}
    for target in targets:  # warm-up, not counted: connections, prepared plans, caches
        await one_round(target, min(ops, 50), projects, cpu, min(reads, 10))
    for round_number in range(rounds):
        order = targets if round_number % 2 == 0 else list(reversed(targets))
        for target in order:
            result = await one_round(target, ops, projects, cpu, reads)
            for op, entry in result.items():
                collected[target.name][op].append(entry)
        print(f"   round {round_number + 1}/{rounds} done", file=sys.stderr, flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for name, per_op in collected.items():
        summary[name] = {}
        for op, entries in per_op.items():
            everything = [s for samples, _, _ in entries for s in samples]
            cpu_ms = sum(c for _, c, _ in entries)
            count = sum(n for _, _, n in entries)
            summary[name][op] = {
                "median_ms": median(everything),
                "p90_ms": round(statistics.quantiles(everything, n=10)[-1], 4),
                "round_medians_ms": [median(samples) for samples, _, _ in entries],
                "pg_cpu_ms_per_op": round(cpu_ms / count, 4) if count else None,
                "samples": len(everything),
            }
    for op in OPS:  # big ÷ control, round by round (the same rounds, the same machine load)
        big = summary[targets[0].name][op]["round_medians_ms"]
        control = summary[targets[-1].name][op]["round_medians_ms"]
        each = [b / c for b, c in zip(big, control, strict=True) if b and c]
        summary[targets[0].name][op]["same_round_ratio"] = median(each)
    return summary


async def replay_verify(url: str, project: str | None, workers: int) -> dict[str, Any]:
    from awooop.projections.registry import get
    from awooop.projections.replay import Replay

    started = time.perf_counter()
    report = await Replay(url, get("run_state"), project=project, workers=workers).run(verify=True)
    return {
        "project": project,
        "workers": workers,
        "seconds": round(time.perf_counter() - started, 2),
        "events": report.bulk_events + report.tail_events + report.snapshot_events,
        "differences": report.differences,
    }


TAIL_EVENTS = 2_000


async def tail_verify(url: str, events: int) -> dict[str, Any]:
    """``replay run_state --tail N``: the runs the last N events touched, verified."""
    from awooop.projections.tail_verify import verify_tail

    seconds = []
    report = None
    for _ in range(5):
        report = await verify_tail(url, events)
        seconds.append(report.seconds)
    assert report is not None
    return {
        "events": events,
        "runs": report.runs,
        "median_seconds": round(statistics.median(seconds), 4),
        "differences": report.diff.total,
    }


# --- sizes of things ---------------------------------------------------------------------

SIZES = """
SELECT c.relname,
       coalesce((SELECT sum(pg_total_relation_size(t.relid))
                 FROM pg_partition_tree(c.oid) t)::bigint,
                pg_total_relation_size(c.oid)) AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
  AND c.relname IN ('awooop_events', 'awooop_event_streams', 'awooop_run_state',
                    'awooop_channel_event_dedupe')
"""


async def disk_report(url: str, cluster_dir: Path) -> dict[str, Any]:
    conn = await connect(url)
    try:
        database = await conn.fetchval("SELECT pg_database_size(current_database())")
        tables = {r["relname"]: round(r["bytes"] / 1e9, 2) for r in await conn.fetch(SIZES)}
        events = await conn.fetchval(
            "SELECT coalesce(sum(version), 0)::bigint FROM awooop_event_streams"
        )
    finally:
        await conn.close()
    return {
        "events": events,
        "database_gb": round(database / 1e9, 2),
        "tables_gb": tables,
        "cluster_dir_gb": round(dir_size(cluster_dir) / 1e9, 2),
        "free_gb": round(shutil.disk_usage(cluster_dir).free / 1e9, 1),
    }


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


# --- the whole benchmark ---------------------------------------------------------------------


def url_of(server: PostgresServer, name: str) -> str:
    return server.url.rsplit("/", 1)[0] + "/" + name


async def create_databases(server: PostgresServer) -> None:
    admin = await connect(server.url)
    try:
        for name in (BIG, CONTROL):
            exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
            if not exists:
                await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    for name in (BIG, CONTROL):
        await migrate(url_of(server, name))


async def bench(
    args: argparse.Namespace, server: PostgresServer, state_path: Path, out: Path
) -> Any:
    sizes = parse_sizes(args.sizes)
    await create_databases(server)
    state = await asyncio.to_thread(read_state, state_path)
    cpu = ClusterCpu(server.data)
    big_url, control_url = url_of(server, BIG), url_of(server, CONTROL)
    settings = load_settings(environ={}, database_url=big_url)
    results: list[dict[str, Any]] = []
    if args.merge:  # the smaller sizes, measured by an earlier run on this cluster
        earlier = json.loads(await asyncio.to_thread(Path(args.merge).read_text))
        results = [r for r in earlier["sizes"] if r["size"] < sizes[0]]
    bytes_per_event: float | None = None
    for size in sizes:
        label = size_label(size)
        entry: dict[str, Any] = {"size": size, "label": label}
        have = await disk_report(big_url, server.dir)
        target_runs = runs_for(size)
        if target_runs < state["runs"]:
            raise RuntimeError(
                f"the log already holds more than {label} events ({state['runs']:,} runs): "
                "measure larger sizes only, or use a fresh --cluster"
            )
        if target_runs > state["runs"]:
            more = target_runs - state["runs"]
            if bytes_per_event:
                need_gb = bytes_per_event * more * 4 / 1e9 + 8  # + WAL (max_wal_size)
                entry["estimated_gb"] = round(need_gb, 1)
                if have["free_gb"] - need_gb < DISK_MARGIN_GB:
                    raise RuntimeError(
                        f"loading {label} needs about {need_gb:.0f} GB, {have['free_gb']} free"
                    )
            print(f"== loading {more:,} runs up to {label}", file=sys.stderr, flush=True)
            entry["load"] = await load(
                big_url,
                state["runs"],
                more,
                args.projects,
                args.days,
                args.load_workers,
                args.seed,
            )
            state["runs"] = target_runs
            await asyncio.to_thread(state_path.write_text, json.dumps(state))
        entry["disk"] = await disk_report(big_url, server.dir)
        if entry["disk"]["events"] >= 100_000:  # the cluster's own files are a few hundred MB
            bytes_per_event = entry["disk"]["database_gb"] * 1e9 / entry["disk"]["events"]
        print(f"== measuring at {label}", file=sys.stderr, flush=True)
        targets = [
            Target("big", big_url, settings),
            Target("control", control_url, settings),
        ]
        for target in targets:
            await target.open()
        try:
            entry["ops"] = await measure(
                targets, args.rounds, args.ops, args.reads or args.ops, args.projects, cpu
            )
        finally:
            for target in targets:
                await target.close()
        entry["replay_tail"] = await tail_verify(big_url, TAIL_EVENTS)
        entry["replay_project"] = await replay_verify(big_url, "growth-0", 1)
        if size <= args.full_verify_max:  # the size asked (the tails add a few thousand)
            entry["replay_full"] = await replay_verify(big_url, None, 2)
        results.append(entry)
        summary = summarise(results, args)
        await asyncio.to_thread(out.write_text, json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary["summary"], indent=1), file=sys.stderr, flush=True)
    return summarise(results, args)


def read_state(path: Path) -> dict[str, Any]:
    """What the cluster already holds (runs loaded), written after each load."""
    state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": 0}
    return state


def summarise(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    base = results[0]["label"]
    table: dict[str, Any] = {}
    for op in OPS:
        measured = [r for r in results if op in r["ops"]["big"]]  # merged runs may lack one
        medians = {r["label"]: r["ops"]["big"][op]["median_ms"] for r in measured}
        cpus = {r["label"]: r["ops"]["big"][op]["pg_cpu_ms_per_op"] for r in measured}
        table[op] = {
            "median_ms": medians,
            "ratio_to_" + base: ratios(medians, base),
            "same_round_ratio": {
                r["label"]: r["ops"]["big"][op]["same_round_ratio"] for r in measured
            },
            "pg_cpu_ms_per_op": cpus,
            "pg_cpu_ratio_to_" + base: ratios(cpus, base),
        }
    replay = {
        "tail": {
            r["label"]: r["replay_tail"]["median_seconds"] for r in results if "replay_tail" in r
        },
        "project": {r["label"]: r["replay_project"]["seconds"] for r in results},
        "full": {r["label"]: r["replay_full"]["seconds"] for r in results if "replay_full" in r},
    }
    return {
        "benchmark": "growth",
        "target_ratio": 1.2,
        "targeted_ops": ["ingest", "claim", "complete", "relay_read"],
        "parameters": {
            k: getattr(args, k)
            for k in ("sizes", "rounds", "ops", "reads", "projects", "days", "load_workers", "seed")
        },
        "merged_from": args.merge,
        "postgres_options": PG_OPTIONS,
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "summary": table,
        "replay_seconds": replay,
        "sizes": results,
    }


def start_server(directory: Path) -> PostgresServer:
    server = PostgresServer(directory, max_connections=100, options=PG_OPTIONS)
    server.init()
    port_file = server.dir / "port"
    if port_file.exists():
        server.port = int(port_file.read_text())
    if not server.running():
        server.start()
    port_file.write_text(str(server.port))
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,10M,50M", help="events in the log, e.g. 0,1M")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--ops", type=int, default=200, help="runs per database per round")
    parser.add_argument(
        "--reads", type=int, help="relay reads per database per round (default: --ops)"
    )
    parser.add_argument("--projects", type=int, default=20)
    parser.add_argument("--days", type=float, default=30.0, help="recorded_at window")
    parser.add_argument("--load-workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--full-verify-max", default="10M", help="whole-log verify up to here")
    parser.add_argument(
        "--cluster", help="the cluster's folder, kept at the end: a rerun resumes from it"
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--out", help="default ops/bench/results/growth-<date>.json")
    parser.add_argument(
        "--merge", help="an earlier run's JSON whose (smaller) sizes come first in this one's"
    )
    args = parser.parse_args()
    parse_sizes(args.sizes)
    args.full_verify_max = parse_size(args.full_verify_max)
    configure_logging("warning")
    directory = Path(args.cluster or tempfile.mkdtemp(prefix="awooop-growth-"))
    server = start_server(directory)
    print(f"== postgres {server.url} in {server.dir}", file=sys.stderr, flush=True)
    started = time.monotonic()
    out = Path(args.out or HERE / "results" / f"growth-{date.today().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(bench(args, server, server.dir / STATE_FILE, out))
    finally:
        if args.keep:
            print(f"== left running: {server.url} ({server.dir})", file=sys.stderr)
        elif args.cluster:
            server.stop("fast")
            print(f"== stopped, kept in {server.dir}", file=sys.stderr)
        else:
            server.stop("immediate")
            shutil.rmtree(server.dir, ignore_errors=True)
            if directory.is_symlink():
                directory.unlink()
            shutil.rmtree(directory, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - started, 1)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
