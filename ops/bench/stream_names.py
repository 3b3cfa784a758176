"""Benchmark: what the stream-name rule (migrations/0115_stream_names.sql) costs the write path.

    .venv/bin/python ops/bench/stream_names.py [--rows 1000000] [--rounds 7] [--out FILE]

In a scratch database on AWOOOP_BENCH_PG_URL (default: the local server), migrated, it measures:

- ``rule``: the CHECK's expression alone, per kind of name (run, domain, revision): a scan of
  ``--rows`` names in a temporary table filtered by ``awooop_stream_of_project`` against the
  same scan filtered by ``IS NOT NULL``, alternating, ``--rounds`` times; the median difference
  per row in microseconds. That is what each written head or event pays, for every role.
- ``writes``: 100,000 RunCreated rows inserted into ``awooop_events`` and 100,000 run heads
  updated, in transactions rolled back, with the two CHECK constraints and with them dropped
  (inside the rolled-back transaction), alternating: the medians in milliseconds. On a loaded
  machine this is noisier than the difference it looks for; ``rule`` is the figure to read.
- ``plan``: the CHECK as Postgres evaluates it (EXPLAIN VERBOSE of a scan filtered by the
  function), which shows the SQL function inlined (no function call per row).

One JSON object on stdout (and in ``--out``). The scratch database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from awooop.core.logs import configure_logging
from awooop.core.migrate import migrate

SERVER = os.environ.get("AWOOOP_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
WRITE_ROWS = 100_000
NAMES = {
    "run": "SELECT 'run-' || gen_random_uuid() AS s, 'p1'::text AS p FROM generate_series(1, $1)",
    "domain": "SELECT 'domain/p1/order-' || n AS s, 'p1'::text AS p FROM generate_series(1, $1) n",
    "revision": (
        "SELECT 'revision-p1/policy_routing/c' || n AS s, 'p1'::text AS p "
        "FROM generate_series(1, $1) n"
    ),
}
BASELINE = "SELECT count(*) FROM names WHERE s IS NOT NULL AND p IS NOT NULL"
RULE = "SELECT count(*) FROM names WHERE awooop_stream_of_project(s, p)"
DROP_CHECKS = (
    "ALTER TABLE awooop_events DROP CONSTRAINT awooop_events_stream_of_project",
    "ALTER TABLE awooop_event_streams DROP CONSTRAINT awooop_event_streams_stream_of_project",
)
INSERT_EVENTS = """
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data)
SELECT gen_random_uuid(), 'run-' || gen_random_uuid(), 1, 'p1', 'RunCreated', '{}'
FROM generate_series(1, $1)
"""
FILL_HEADS = """
INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
SELECT 'run-' || gen_random_uuid(), 'p1', 1, pg_current_xact_id() FROM generate_series(1, $1)
"""
UPDATE_HEADS = "UPDATE awooop_event_streams SET version = version + 1"
PARTITIONS = (
    "SELECT awooop_ensure_log_partitions(now() - interval '1 day', now() + interval '8 days', 7)"
)


async def timed(conn: Any, sql: str, *args: Any) -> float:
    started = time.perf_counter()
    await conn.execute(sql, *args)
    return (time.perf_counter() - started) * 1000


async def rule_cost(conn: Any, rows: int, rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for kind, names in NAMES.items():
        await conn.execute("DROP TABLE IF EXISTS names")
        await conn.execute(f"CREATE TEMP TABLE names AS {names}", rows)
        await conn.execute("VACUUM ANALYZE names")
        assert await conn.fetchval(RULE) == rows  # every name is the project's
        base, rule = [], []
        for _ in range(rounds):
            base.append(await timed(conn, BASELINE))
            rule.append(await timed(conn, RULE))
        diffs = [(r - b) * 1000 / rows for r, b in zip(rule, base, strict=True)]
        result[kind] = {
            "scan_ms_median": round(statistics.median(base), 1),
            "scan_with_rule_ms_median": round(statistics.median(rule), 1),
            "rule_us_per_row_median": round(statistics.median(diffs), 3),
        }
    return result


async def write_cost(conn: Any, rounds: int) -> dict[str, Any]:
    await conn.execute(FILL_HEADS, WRITE_ROWS)
    await conn.execute("VACUUM ANALYZE awooop_event_streams")
    found: dict[str, dict[str, list[float]]] = {
        mode: {"insert_events_ms": [], "update_heads_ms": []} for mode in ("checked", "unchecked")
    }
    for _ in range(rounds):
        for mode in ("checked", "unchecked"):
            tx = conn.transaction()
            await tx.start()
            try:
                if mode == "unchecked":
                    for statement in DROP_CHECKS:
                        await conn.execute(statement)
                found[mode]["insert_events_ms"].append(await timed(conn, INSERT_EVENTS, WRITE_ROWS))
                found[mode]["update_heads_ms"].append(await timed(conn, UPDATE_HEADS))
            finally:
                await tx.rollback()
            await conn.execute("VACUUM awooop_event_streams")
    return {
        mode: {name: round(statistics.median(values), 1) for name, values in figures.items()}
        for mode, figures in found.items()
    } | {"rows": WRITE_ROWS}


async def measure(rows: int, rounds: int) -> dict[str, Any]:
    name = f"awooop_bench_names_{uuid.uuid4().hex[:8]}"
    url = SERVER.rsplit("/", 1)[0] + "/" + name
    report: dict[str, Any] = {"rows": rows, "rounds": rounds}
    try:
        await migrate(url)
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SET client_min_messages = warning")
            await conn.execute(PARTITIONS)
            report["postgres"] = await conn.fetchval("SHOW server_version")
            report["rule"] = await rule_cost(conn, rows, rounds)
            plan = await conn.fetch("EXPLAIN (VERBOSE, COSTS OFF) " + RULE)
            report["plan"] = [r[0] for r in plan]
            report["writes"] = await write_cost(conn, rounds)
        finally:
            await conn.close()
    finally:
        admin = await asyncpg.connect(SERVER)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args()
    configure_logging("warning")  # stdout is the JSON result
    text = json.dumps(asyncio.run(measure(args.rows, args.rounds)), indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
