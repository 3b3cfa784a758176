"""Benchmark: another tenant's start latency while one login holds a transaction open.

    .venv/bin/python ops/bench/open_transaction.py [--runs 1000] [--rate 20] [--hold-s 0]
                                                   [--code DIR ...] [--rounds 1] [--out FILE]

Prints one JSON document (a summary goes to stderr). Every process is real: one ``awooop relay``
and one ``awooop worker`` (handler ``worker_handlers:stamp``) of the checkout under test.

A producer login bound to project ``alpha`` (a role of its own, ``awooop tenants grant``) opens
a transaction, submits one ``alpha`` run in it and keeps it open. Meanwhile project ``beta``
submits ``--runs`` runs one per transaction at ``--rate`` per second (through the producer
library, as the HTTP server does). The holder stays open for ``--hold-s`` seconds (default:
until the last ``beta`` run was submitted, plus 10 s; the full run is ``--hold-s 600``: the
``beta`` runs are then submitted in the hold's last part, behind a transaction already minutes
old), then commits. Reported:

- ``start_latency_ms``: p50/p99/max of submit commit to handler start (the handler returns its
  wall clock; same host) for the ``beta`` runs;
- ``started_while_held``: ``beta`` runs whose handler started before the holder committed;
- ``lost``: runs (``beta`` and the held ``alpha`` run) not COMPLETED within 120 s of the commit;
- ``order_violations``: run streams whose first copies in the Redis events streams are not in
  version order 1..n, and ``duplicates``: entries published more than once.

A/B: ``--code DIR`` (repeatable) runs the relay and the worker of another checkout (with its own
``make install``); ``--rounds N`` interleaves the checkouts (A B, B A, ...), as ``cost.py`` does.
The scratch database is migrated by this checkout (the schemas must be the same).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "ops" / "bench"))

from worker import (  # noqa: E402 - after the sys.path lines, for a plain script
    Processes,
    Scratch,
    event,
    percentile,
    process_env,
    redis_url,
    with_database,
)

from awooop.core.db import Connection, Database  # noqa: E402
from awooop.core.events import run_id_of_stream  # noqa: E402
from awooop.core.pools import connect  # noqa: E402
from awooop.ingest import tenants  # noqa: E402
from awooop.producer import set_tenant, submit  # noqa: E402
from awooop.services import redis_client  # noqa: E402
from awooop.streams.envelope import FIELD, decode_envelope  # noqa: E402
from awooop.streams.keys import Keys  # noqa: E402

HOLDER_PROJECT = "alpha"
PROJECT = "beta"
LOST_AFTER_S = 120.0


class Holder:
    """A producer login of its own, bound to ``alpha``, holding one transaction open."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.role = f"awooop_bench_holder_{uuid.uuid4().hex[:8]}"
        self.conn: Connection | None = None
        self.tx: Any = None
        self.run_id: uuid.UUID | None = None

    async def open(self) -> None:
        admin = await asyncpg.connect(self.url)
        try:
            await admin.execute(f'CREATE ROLE "{self.role}" LOGIN')
            await tenants.grant(admin, self.role, [HOLDER_PROJECT])
        finally:
            await admin.close()
        url = urlsplit(self.url)
        login = urlunsplit(url._replace(netloc=f"{self.role}@{url.hostname}:{url.port or 5432}"))
        self.conn = await connect(login)
        self.tx = self.conn.transaction()
        await self.tx.start()
        await set_tenant(self.conn, HOLDER_PROJECT)
        done = await submit(self.conn, HOLDER_PROJECT, event())
        self.run_id = done.run_id

    async def commit(self) -> None:
        if self.tx is not None:
            await self.tx.commit()
            self.tx = None

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
        admin = await asyncpg.connect(with_database(self.url, "postgres"))
        try:
            await admin.execute(f'DROP ROLE IF EXISTS "{self.role}"')
        finally:
            await admin.close()


async def order_check(scratch: Scratch) -> dict[str, int]:
    """First copies per run stream in version order 1..n; entries published more than once."""
    client = redis_client(redis_url())
    keys = Keys(scratch.prefix, scratch.settings().shard_count)
    versions: dict[str, list[int]] = defaultdict(list)
    seen: set[uuid.UUID] = set()
    duplicates = 0
    try:
        for shard in keys.shards():
            for _id, fields in await client.xrange(keys.events_stream(shard)):
                env = decode_envelope(fields[FIELD])
                if env.event_id in seen:
                    duplicates += 1
                    continue
                seen.add(env.event_id)
                versions[env.stream_id].append(env.version)
    finally:
        await client.aclose()
    violations = sum(
        1
        for stream, got in versions.items()
        if run_id_of_stream(stream) is not None and got != list(range(1, len(got) + 1))
    )
    return {"streams": len(versions), "order_violations": violations, "duplicates": duplicates}


async def one_round(code: Path, runs: int, rate: float, hold_s: float, tmp: Path) -> dict[str, Any]:
    async with Scratch() as scratch:
        procs = Processes(tmp, code)
        env = process_env(scratch.url, redis_url(), scratch.prefix, code)
        db = await Database.open(scratch.url, max_size=4)
        holder = Holder(scratch.url)
        committed: dict[uuid.UUID, float] = {}
        try:
            procs.start("relay", ["relay"], env)
            procs.start("w0", ["worker", "--handler", "worker_handlers:stamp"], env)
            procs.wait_started("w0")
            await asyncio.sleep(0.5)  # the relay and the consumer groups settle
            await holder.open()
            opened = time.perf_counter()
            submit_s = runs / rate
            hold = max(hold_s, submit_s + 10.0)
            await asyncio.sleep(max(0.0, hold - submit_s - 10.0))
            begin = time.perf_counter()
            for i in range(runs):
                delay = begin + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                done = await submit(db, PROJECT, event(i), settings=scratch.settings())
                committed[done.run_id] = time.time()
            await asyncio.sleep(max(0.0, opened + hold - time.perf_counter()))
            released = time.time()
            held_for = time.perf_counter() - opened
            await holder.commit()
            deadline = time.monotonic() + LOST_AFTER_S
            rows: list[Any] = []
            while time.monotonic() < deadline:
                async with db.platform_writes() as conn:
                    rows = await conn.fetch(
                        "SELECT run_id, project_id, result FROM awooop_run_state "
                        "WHERE status = 'COMPLETED'"
                    )
                if len(rows) >= runs + 1:
                    break
                await asyncio.sleep(0.2)
            order = await order_check(scratch)
        finally:
            procs.stop_all()
            await db.close()
            await holder.close()
    done_ids = {r["run_id"] for r in rows}
    mine = [r for r in rows if r["run_id"] in committed]
    lat = [(float(r["result"]) - committed[r["run_id"]]) * 1000 for r in mine]
    return {
        "code": str(code),
        "runs": runs,
        "rate_per_s": rate,
        "held_s": round(held_for, 1),
        "completed": len(mine),
        "lost": len(committed) - len(mine) + (0 if holder.run_id in done_ids else 1),
        "started_while_held": sum(1 for r in mine if float(r["result"]) < released),
        "start_latency_ms": {
            "p50": round(percentile(lat, 0.50), 1),
            "p99": round(percentile(lat, 0.99), 1),
            "max": round(max(lat), 1) if lat else None,
        },
        **order,
    }


async def main(args: argparse.Namespace, codes: list[Path]) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="awooop-bench-hold-") as tmp:
        for round_no in range(args.rounds):
            order = codes if round_no % 2 == 0 else list(reversed(codes))
            for code in order:
                result = await one_round(code, args.runs, args.rate, args.hold_s, Path(tmp))
                result["round"] = round_no
                results.append(result)
                print(json.dumps(result), file=sys.stderr)
    return {
        "benchmark": "open_transaction",
        "target": "beta start latency p99 < 2000 ms while alpha holds a transaction open, "
        "nothing lost, no order violation",
        "results": results,
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument(
        "--hold-s",
        type=float,
        default=0.0,
        help="hold the transaction this long (at least the submissions + 10 s)",
    )
    parser.add_argument("--code", action="append", help="a checkout to run (repeatable)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", help="also write the JSON here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    checkouts = [Path(c).resolve() for c in (arguments.code or [str(ROOT)])]
    document = asyncio.run(main(arguments, checkouts))
    text = json.dumps(document, indent=2)
    print(text)
    if arguments.out:
        Path(arguments.out).write_text(text + "\n")
