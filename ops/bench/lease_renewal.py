"""What a worker's heartbeat costs as its leases grow, under a worker session and without.

    .venv/bin/python ops/bench/lease_renewal.py [--leases 100,1000,5000,10000] [--repeat 20]
                                                [--modes session,runs]
                                                [--indexes lease_until,worker_id] [--out FILE]

``--modes``: ``session`` (the default worker: one statement renews the session's row,
``session_renew.sql``, and through it every lease) and ``runs`` (``AWOOOP_SESSION_LEASES=false``:
one statement renews every lease the worker holds, ``renew_leases.sql``, with the step of
each attempt). Per count the modes take turns, their order alternating from one count to the
next (an interleaved A/B on one server).

On a scratch database of the benchmark server (``scratch.Scratch``, dropped at the end) it
submits the largest count of runs (``submit_many``), claims them all for one worker
(``claim_many``, a 300 s lease) and, for each count N, sends ``--repeat`` renewals of the first
N leases, as the heartbeat sends them (half of the attempts in a step). Per N: the statement's
median and p95 time, the Postgres backend's CPU (from /proc: the server must be on this
machine) and the WAL written (``pg_current_wal_lsn``) per renewal and per lease, and the rows
renewed, and how many of the row updates were HOT (``pg_stat_user_tables``). Prints one JSON
document and keeps it in ``ops/bench/results/lease-renewal-<time>.json``. The per-second load
of a worker is the per-renewal figure divided by ``AWOOOP_HEARTBEAT_INTERVAL_S`` (5 s by
default).

``--indexes``: the leased runs' index under which to measure, in turn: ``worker_id`` (the
schema's, ``awooop_run_state_leased_worker_idx``: a renewal changes no indexed column and can be
HOT) and ``lease_until`` (the index of releases before migration 0158, built on the scratch
database in its place: every renewal is a new version with an entry in every index). Each row
names its ``index``.
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
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from scratch import Scratch, report  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.pools import init_connection  # noqa: E402
from awooop.eventlog.runs import renew_leases  # noqa: E402
from awooop.producer import ChannelEvent, set_tenant, submit_many  # noqa: E402
from awooop.runs import leases  # noqa: E402
from awooop.runs.leases import sessions  # noqa: E402

PROJECT = "bench"
WORKER = "w-renewal"
TICK = os.sysconf("SC_CLK_TCK")
UPDATES = """
SELECT sum(n_tup_upd) FILTER (WHERE relname = 'awooop_run_state')::bigint AS n_tup_upd,
       sum(n_tup_hot_upd) FILTER (WHERE relname = 'awooop_run_state')::bigint AS n_tup_hot_upd,
       sum(n_tup_upd) FILTER (WHERE relname = 'awooop_worker_sessions')::bigint AS session_upd
FROM pg_stat_user_tables WHERE relname IN ('awooop_run_state', 'awooop_worker_sessions')
"""
WAL_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)"
SESSION = "SELECT started_at FROM awooop_worker_sessions WHERE worker_id = $1"
Renewal = Callable[[], Awaitable[int]]
# The session mode's renewals per --repeat: /proc counts CPU in clock ticks (10 ms here).
SESSION_REPEAT = 50
INDEXES = "SELECT count(*) FROM pg_indexes WHERE tablename = 'awooop_run_state'"


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def make_leases(url: str, count: int) -> list[uuid.UUID]:
    """``count`` runs, all claimed by :data:`WORKER` (a 300 s lease)."""
    settings = load_settings(environ={}, database_url=url, redis_url="redis://127.0.0.1:6379/0")
    conn = await asyncpg.connect(url)
    await init_connection(conn)
    try:
        await sessions.start(conn, WORKER, 3600.0)  # the session mode's row (an hour: no lapse)
        ids: list[uuid.UUID] = []
        for start in range(0, count, 1000):
            events = [
                ChannelEvent("api", uuid.uuid4().hex, {"n": start + i})
                for i in range(min(1000, count - start))
            ]
            async with conn.transaction():
                await set_tenant(conn, PROJECT)
                done = await submit_many(conn, PROJECT, events, settings=settings)
            batch = [d.run_id for d in done]
            claimed = await leases.claim_many(conn, batch, WORKER, 300.0, fair=False)
            ids.extend(r for r in batch if r in claimed.claimed)
        return ids
    finally:
        await conn.close()


async def renewal(conn: asyncpg.Connection, mode: str, runs: list[uuid.UUID]) -> Renewal:
    """One heartbeat round of ``mode`` for the leases ``runs``: answers how many it renewed."""
    if mode == "session":
        row = await conn.fetchrow(SESSION, WORKER)
        session = sessions.Session(WORKER, row["started_at"])

        async def renew_session() -> int:
            return len(runs) if await sessions.renew(conn, session, 30.0) is not None else 0

        return renew_session
    held = dict.fromkeys(runs, 1)
    now = datetime.now(UTC)
    steps = {r: ("s0", now) for r in runs[::2]}

    async def renew_runs() -> int:
        return len(await renew_leases(conn, WORKER, held, 300.0, steps))

    return renew_runs


async def measure(url: str, runs: list[uuid.UUID], repeat: int, mode: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    await init_connection(conn)
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        renew = await renewal(conn, mode, runs)
        await renew()  # plans and caches warm
        times: list[float] = []
        renewed = 0
        await conn.execute("SELECT pg_stat_force_next_flush()")
        updates0 = await conn.fetchrow(UPDATES)
        lsn0 = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
        cpu0 = cpu_s(pid)
        for _ in range(repeat):
            started = time.perf_counter()
            renewed = await renew()
            times.append(time.perf_counter() - started)
        cpu1 = cpu_s(pid)
        wal = await conn.fetchval(WAL_SINCE, lsn0)
        await conn.execute("SELECT pg_stat_force_next_flush()")
        updates1 = await conn.fetchrow(UPDATES)
        indexes = await conn.fetchval(INDEXES)
    finally:
        await conn.close()
    n = len(runs)
    ms = sorted(t * 1000 for t in times)
    cpu_ms = (cpu1 - cpu0) * 1000 / repeat
    wal_bytes = float(wal) / repeat
    return {
        "mode": mode,
        "leases": n,
        "renewals": repeat,
        "renewed": renewed,
        "median_ms": round(statistics.median(ms), 3),
        "p95_ms": round(ms[max(0, round(0.95 * len(ms)) - 1)], 3),
        "median_us_per_lease": round(statistics.median(ms) * 1000 / n, 2),
        "backend_cpu_ms": round(cpu_ms, 3),
        "backend_cpu_us_per_lease": round(cpu_ms * 1000 / n, 2),
        "wal_bytes": round(wal_bytes),
        "wal_bytes_per_lease": round(wal_bytes / n, 1),
        # A row update that moves an indexed column is not HOT: it adds an entry to every
        # index of the table (``indexes``), which vacuum later removes.
        "row_updates": updates1["n_tup_upd"] - updates0["n_tup_upd"],
        "hot_updates": updates1["n_tup_hot_upd"] - updates0["n_tup_hot_upd"],
        "session_row_updates": updates1["session_upd"] - updates0["session_upd"],
        "indexes": indexes,
    }


# The leased runs' index before migration 0158, keyed by the column a renewal writes
# (--indexes lease_until); the schema's is keyed by worker_id.
LEASE_UNTIL_INDEX = """
DROP INDEX awooop_run_state_leased_worker_idx;
CREATE INDEX awooop_run_state_leased_idx ON awooop_run_state (lease_until)
    WHERE status IN ('RUNNING', 'WAITING_TOOL');
"""


async def use_index(url: str, index: str) -> None:
    """Measure under ``index``, on a vacuumed table (as autovacuum keeps a busy one): the claims'
    old row versions gone, their room on the pages free."""
    conn = await asyncpg.connect(url)
    try:
        if index == "lease_until":
            await conn.execute(LEASE_UNTIL_INDEX)
        await conn.execute("VACUUM ANALYZE awooop_run_state")
    finally:
        await conn.close()


async def run(
    counts: list[int], repeat: int, indexes: list[str], modes: list[str]
) -> dict[str, Any]:
    async with Scratch("leases") as scratch:
        runs = await make_leases(scratch.url, max(counts))
        rows = []
        for index in indexes:
            await use_index(scratch.url, index)
            for turn, n in enumerate(counts):
                for mode in modes if turn % 2 == 0 else modes[::-1]:
                    # a session renewal takes well under a CPU clock tick: many more of them
                    times = repeat * SESSION_REPEAT if mode == "session" else repeat
                    measured = await measure(scratch.url, runs[:n], times, mode)
                    rows.append({"index": index, **measured})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {
        "benchmark": "lease-renewal",
        "command": " ".join(["ops/bench/lease_renewal.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "repeat": repeat,
        "sizes": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", default="100,1000,5000,10000", help="lease counts")
    parser.add_argument("--repeat", type=int, default=20, help="renewals per count")
    parser.add_argument(
        "--indexes", default="worker_id", help="worker_id and/or lease_until, in this order"
    )
    parser.add_argument("--modes", default="session,runs", help="session and/or runs")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.leases.split(","))
    indexes = args.indexes.split(",")
    if indexes not in (["worker_id"], ["lease_until"], ["worker_id", "lease_until"]):
        parser.error("--indexes: worker_id, lease_until, or worker_id,lease_until")
    modes = args.modes.split(",")
    if not modes or not set(modes) <= {"session", "runs"}:
        parser.error("--modes: session, runs, or both")
    result = asyncio.run(run(counts, args.repeat, indexes, modes))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "lease-renewal")


if __name__ == "__main__":
    main()
