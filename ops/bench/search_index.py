"""What the run search's trigram index costs the run writes: a claim, as the input grows.

    .venv/bin/python ops/bench/search_index.py [--runs 2000] [--sizes 30,400,2000]
                                               [--rounds 3] [--batch 10] [--out FILE]

Every status change of a run is a new row version, with an entry in each index whose predicate
the new version meets; a trigram (GIN) entry is one per distinct trigram of the run's input,
result and failure text. The schema's index (``settled``, migration 0160) leaves out the leased
runs (RUNNING, WAITING_TOOL), so a claim writes none; ``all`` is the index of releases before
it (0128: every version), built on the scratch database in its place.

On a scratch database of the benchmark server (``scratch.Scratch``, dropped at the end), for
each round, input size and index in turn (the order reversed every other round): the run tables
emptied, the index put in place, ``--runs`` runs submitted (``submit_many``, 500 per
transaction) whose input is text of about ``--sizes`` bytes (words of a 400-word vocabulary, as
prose repeats its words), ``VACUUM ANALYZE``, then every run claimed for one worker
(``claim_many``, ``--batch`` runs per statement, as a worker claims for its free slots). Per
measurement: the Postgres backend's CPU (``/proc/<pid>/schedstat``: the server must be on this
machine) and the WAL per run, of the submits and of the claims, each after a ``CHECKPOINT`` (so
that every page's first change writes its full image in both indexes' measurements alike).
``summary``: medians over the rounds per size and index, and per size the ratio ``settled`` /
``all``. Prints one JSON document and keeps it in ``ops/bench/results/search-index-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from producer_pool_blocks import on_cpu_ns  # noqa: E402
from scratch import Scratch, report  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.pools import init_connection  # noqa: E402
from awooop.producer import ChannelEvent, set_tenant, submit_many  # noqa: E402
from awooop.runs import leases  # noqa: E402

PROJECT = "bench"
WORKER = "w-search-index"
INDEXES = ("settled", "all")
TABLES = "awooop_run_state, awooop_events, awooop_event_streams, awooop_channel_event_dedupe"
# The trigram index's expression (0128, 0160); the schema's index (settled) leaves out the leased
# runs, the index of releases before 0160 (all) takes every row version.
EXPRESSION = (
    "(input::text || ' ' || coalesce(result::text, '') || ' ' || coalesce(failure_reason, ''))"
)
PLACED = {
    "settled": ("awooop_run_state_search_settled_idx", "awooop_run_state_search_idx",
                " WHERE status NOT IN ('RUNNING', 'WAITING_TOOL')"),
    "all": ("awooop_run_state_search_idx", "awooop_run_state_search_settled_idx", ""),
}  # fmt: skip


def place(index: str) -> str:
    """The statements that leave ``index`` the table's only trigram index."""
    name, other, where = PLACED[index]
    return (
        f"DROP INDEX IF EXISTS {other}; CREATE INDEX IF NOT EXISTS {name} ON awooop_run_state"
        f" USING gin ({EXPRESSION} gin_trgm_ops){where}"
    )


WAL_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)"


def text_of(size: int, rng: random.Random, vocabulary: list[str]) -> str:
    """Pure: about ``size`` bytes of words drawn from ``vocabulary``."""
    words: list[str] = []
    length = 0
    while length < size:
        words.append(rng.choice(vocabulary))
        length += len(words[-1]) + 1
    return " ".join(words)


async def measure(url: str, index: str, size: int, runs: int, batch: int) -> dict[str, Any]:
    settings = load_settings(environ={}, database_url=url, redis_url="redis://127.0.0.1:6379/0")
    rng = random.Random(size)
    vocabulary = [uuid.UUID(int=rng.getrandbits(128)).hex[: rng.randint(3, 9)] for _ in range(400)]
    conn = await asyncpg.connect(url)
    await init_connection(conn)
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
        await conn.execute(place(index))
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await conn.execute("CHECKPOINT")  # each phase starts one: full-page images alike
        lsn = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
        cpu = on_cpu_ns([pid])
        ids: list[uuid.UUID] = []
        for start in range(0, runs, 500):
            events = [
                ChannelEvent("api", uuid.uuid4().hex, {"text": text_of(size, rng, vocabulary)})
                for _ in range(min(500, runs - start))
            ]
            async with conn.transaction():
                await set_tenant(conn, PROJECT)
                done = await submit_many(conn, PROJECT, events, settings=settings)
            ids.extend(d.run_id for d in done)
        submit_cpu, submit_wal = on_cpu_ns([pid]) - cpu, float(await conn.fetchval(WAL_SINCE, lsn))
        await conn.execute("VACUUM ANALYZE awooop_run_state")
        await conn.execute("CHECKPOINT")
        lsn = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
        cpu = on_cpu_ns([pid])
        claimed = 0
        for start in range(0, len(ids), batch):
            some = ids[start : start + batch]
            claimed += len((await leases.claim_many(conn, some, WORKER, 300.0, fair=False)).claimed)
        claim_cpu, claim_wal = on_cpu_ns([pid]) - cpu, float(await conn.fetchval(WAL_SINCE, lsn))
    finally:
        await conn.close()
    if claimed != runs:
        raise RuntimeError(f"claimed {claimed} of {runs} runs")
    return {
        "index": index,
        "input_bytes": size,
        "submit_backend_us_per_run": round(submit_cpu / 1000 / runs, 1),
        "submit_wal_bytes_per_run": round(submit_wal / runs),
        "claim_backend_us_per_run": round(claim_cpu / 1000 / runs, 1),
        "claim_wal_bytes_per_run": round(claim_wal / runs),
    }


FIGURES = (
    "submit_backend_us_per_run",
    "submit_wal_bytes_per_run",
    "claim_backend_us_per_run",
    "claim_wal_bytes_per_run",
)


def summary(rows: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Pure: medians per size and index over the rounds, and ``settled`` / ``all`` per size."""
    out: dict[str, Any] = {}
    for size in sizes:
        medians = {
            index: {
                f: statistics.median(
                    r[f] for r in rows if r["index"] == index and r["input_bytes"] == size
                )
                for f in FIGURES
            }
            for index in INDEXES
        }
        ratio = {
            f: round(medians["settled"][f] / medians["all"][f], 3) if medians["all"][f] else None
            for f in FIGURES
        }
        out[str(size)] = {**medians, "settled_to_all": ratio}
    return out


async def run(runs: int, sizes: list[int], rounds: int, batch: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    async with Scratch("search_index") as scratch:
        for number in range(rounds):
            order = INDEXES if number % 2 == 0 else tuple(reversed(INDEXES))
            for size in sizes:
                for index in order:
                    rows.append(
                        {"round": number + 1} | await measure(scratch.url, index, size, runs, batch)
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {
        "benchmark": "search-index",
        "command": " ".join(["ops/bench/search_index.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {"runs": runs, "sizes": sizes, "rounds": rounds, "batch": batch},
        "summary": summary(rows, sizes),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per measurement")
    parser.add_argument("--sizes", default="30,400,2000", help="input sizes in bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10, help="runs per claim statement")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    result = asyncio.run(run(args.runs, sizes, args.rounds, args.batch))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "search-index")


if __name__ == "__main__":
    main()
