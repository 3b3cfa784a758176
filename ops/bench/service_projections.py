"""Benchmark: a service's projection (the example ``awooop.examples.read_models:OpenTickets``)
applied from Postgres by the projector runner, and rebuilt by the replay tool: events/s.

    .venv/bin/python ops/bench/service_projections.py [--events 100000] [--rounds 3]

It creates a scratch database on AWOOOP_BENCH_PG_URL (default: the local server), migrates it,
creates the example's table (``awooop/examples/read_models.sql``), bulk-loads domain events
(``TicketOpened``, ``TicketClosed`` and, one in ten, an event of a type the projection passes
over) of 20 projects, 50 streams each, straight into the log with COPY, then per round, on an
emptied view and checkpoint table:

- ``reconcile``: ``Projector.reconcile()`` applies every event from Postgres (the runner's
  transactions: stream locks, checkpoints read and written, the service's ``apply``);
- ``replay_swap``: ``awooop replay open_tickets --swap`` (bulk pass through ``apply`` into the
  shadow, indexes, verify, swap with the checkpoints rewritten).

It prints one JSON object with each measure's median events/s over the rounds. The scratch
database is dropped at the end, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg

from awooop.core.db import Database
from awooop.core.logs import configure_logging
from awooop.core.migrate import migrate
from awooop.core.pools import connect
from awooop.examples import read_models
from awooop.projections.bulk import use_binary_json
from awooop.projections.registered import registered
from awooop.projections.replay import Replay
from awooop.projections.runner import Projector

SERVER = os.environ.get("AWOOOP_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
EVENT_COLUMNS = ("event_id", "stream_id", "version", "project_id", "event_type", "data", "metadata")
STREAMS = """
INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
SELECT stream_id, min(project_id), max(version), pg_current_xact_id()
FROM awooop_events GROUP BY stream_id
"""
EMPTY = "TRUNCATE example_open_tickets; DELETE FROM awooop_projection_checkpoints"
PROJECTS, STREAMS_PER_PROJECT = 20, 50


def url_for(name: str) -> str:
    return SERVER.rsplit("/", 1)[0] + "/" + name


def event_rows(total: int, seed: int = 1) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(seed)
    versions: Counter[str] = Counter()
    for n in range(total):
        project = f"bench-{rng.randrange(PROJECTS)}"
        stream = f"domain/{project}/queue-{rng.randrange(STREAMS_PER_PROJECT)}"
        versions[stream] += 1
        roll = rng.random()
        kind = "InvoiceSent" if roll < 0.1 else "TicketClosed" if roll < 0.4 else "TicketOpened"
        data = {"ticket": f"T-{n}", "queue": stream.rsplit("-", 1)[1]}
        yield (uuid.uuid4(), stream, versions[stream], project, kind, data, {})


async def load(url: str, total: int) -> float:
    conn = await connect(url)
    await use_binary_json(conn)
    started = time.perf_counter()
    try:
        await conn.execute((Path(read_models.__file__).parent / "read_models.sql").read_text())
        rows = event_rows(total)
        while chunk := [row for _, row in zip(range(50_000), rows, strict=False)]:
            await conn.copy_records_to_table("awooop_events", records=chunk, columns=EVENT_COLUMNS)
        await conn.execute(STREAMS)
        await conn.execute("ANALYZE awooop_events")
    finally:
        await conn.close()
    return time.perf_counter() - started


async def one_round(url: str, db: Database, total: int) -> dict[str, float]:
    conn = await connect(url)
    try:
        await conn.execute(EMPTY)
    finally:
        await conn.close()
    projection = registered(read_models.OpenTickets(), "bench")
    started = time.perf_counter()
    applied = await Projector(db, projection).reconcile()
    reconcile_s = time.perf_counter() - started
    assert applied == total, (applied, total)
    started = time.perf_counter()
    report = await Replay(url, registered(read_models.OpenTickets(), "bench")).run(swap=True)
    replay_s = time.perf_counter() - started
    assert report.differences == 0 and report.swapped, report.lines()
    return {"reconcile": total / reconcile_s, "replay_swap": total / replay_s}


async def main(total: int, rounds: int) -> dict[str, Any]:
    name = f"awooop_bench_service_{uuid.uuid4().hex[:8]}"
    url = url_for(name)
    try:
        await migrate(url)
        load_s = await load(url, total)
        db = await Database.open(url, max_size=4)
        try:
            results = [await one_round(url, db, total) for _ in range(rounds)]
        finally:
            await db.close()
    finally:
        admin = await asyncpg.connect(url_for("postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    return {
        "benchmark": "service projection (open_tickets)",
        "cpus": os.cpu_count(),
        "events": total,
        "streams": PROJECTS * STREAMS_PER_PROJECT,
        "load_s": round(load_s, 1),
        "rounds": rounds,
        "median_events_per_s": {
            key: round(statistics.median(r[key] for r in results)) for key in results[0]
        },
        "events_per_s": [{k: round(v) for k, v in r.items()} for r in results],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    configure_logging("warning")
    sys.stdout.write(json.dumps(asyncio.run(main(args.events, args.rounds)), indent=2) + "\n")
