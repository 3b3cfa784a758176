"""Benchmark: the cost of producing through a pool, one transaction per run, against one
connection; an interleaved A/B of the ways to make the pool.

    .venv/bin/python ops/bench/producer_pool.py [--runs 2000] [--rounds 5] [--prefill 5000]
                                    [--modes database,pool_producer,connection,pool_docs,...]

ONE client submits one run per transaction, sequentially, as a producer service does:
``BEGIN``, :func:`awooop.producer.set_tenant`, :func:`awooop.producer.submit`, ``COMMIT``,
logged in as a producer login of its own bound to the project (``awooop tenants grant``), on
a scratch database (migrated, dropped at the end) of AWOOOP_BENCH_PG_URL (default: the local
server). Modes (:data:`MODES`):

- ``pool_docs``: ``asyncpg.create_pool(url, init=awooop.core.pools.init_connection)`` (the
  runtime's own connection setup), a connection acquired per transaction;
- ``pool_producer``: ``awooop.producer.create_pool(url)``, ``conn.transaction()`` then
  ``set_tenant``; ``pool_transaction``: the same pool, ``producer.transaction(conn, project)``;
- ``connection``: one ``asyncpg.connect`` (with ``producer.init_connection``), all runs on it;
- ``database``: ``awooop.producer.submit(db, ...)`` on the runtime's ``Database`` (its
  ingest sessions: one statement per run in its own transaction, no ``BEGIN``/``COMMIT`` of the
  caller's), logged in as the database's owner, as the runtime's processes are; the baseline
  the other modes are compared with (``--modes database,...`` puts it first);
- ``pool_owner``: ``pool_producer`` logged in as the owner (as ``database``): what the
  producer login's policies cost, apart from the transaction's statements;
- one change at a time from ``pool_docs``, to tell where the cost goes: ``pool_plain``
  (``asyncpg.create_pool(url)``: no init, no codecs), ``pool_noreset`` (``init`` =
  ``producer.init_connection``, no reset query on release), ``pool_generic`` (the same init,
  ``plan_cache_mode=force_generic_plan``, asyncpg's reset query).

Every measurement starts on the same tables (:func:`fresh_tables`: ``--prefill`` runs, then
``ANALYZE``), on a new connection or pool; ``ingest_plans_last_connection`` counts the plans
Postgres made of the ingest statement (generic, custom) on the last connection used.

Per mode and round: runs/s (wall), CPU per run in ms of the client process
(``time.process_time``) and of the login's Postgres backends (/proc of their pids: the server
must be local), their sum (``stack_cpu_ms_per_run``), and the statements the client sent per
run by kind (``BEGIN``, ``set_tenant``, the two in one query (``begin_tenant``), the
configuration read, the ingest statement, ``COMMIT``, the pool's reset query), counted by a query
logger over ``--warmup`` more runs after the measured ones: no logger runs while CPU is measured
(statement_kinds.py). Rounds run the modes in turn, the order reversed every other round (A B, B A,
...); ``summary``: each mode's medians over the rounds, and their ratio to the first's.
Prints the JSON, written to ops/bench/results/producer-pool-<time>.json."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import asyncpg  # noqa: E402
from scratch import SERVER, Scratch, report  # noqa: E402
from statement_kinds import Counted  # noqa: E402

from awooop import producer  # noqa: E402
from awooop.core import pools  # noqa: E402
from awooop.core.config import load_settings  # noqa: E402
from awooop.core.db import Database  # noqa: E402
from awooop.ingest import tenants  # noqa: E402

PROJECT = "bench"
TICK = os.sysconf("SC_CLK_TCK")


# --- the modes --------------------------------------------------------------------------------

Acquire = Callable[[], Any]  # an async context manager giving a connection


async def make_connection(url: str, counted: Counted) -> tuple[Acquire, Callable[[], Any]]:
    conn = await asyncpg.connect(url)
    await producer.init_connection(conn)
    counted.attach(conn)

    @asynccontextmanager
    async def acquire() -> AsyncIterator[Any]:
        yield conn

    return acquire, conn.close


async def make_pool_docs(url: str, counted: Counted) -> tuple[Acquire, Callable[[], Any]]:
    pool = await asyncpg.create_pool(url, init=counted_init(counted, pools.init_connection))
    return pool.acquire, pool.close


async def make_pool_plain(url: str, counted: Counted) -> tuple[Acquire, Callable[[], Any]]:
    pool = await asyncpg.create_pool(url, init=counted_init(counted))
    return pool.acquire, pool.close


async def make_pool_noreset(url: str, counted: Counted) -> tuple[Acquire, Callable[[], Any]]:
    init = counted_init(counted, producer.init_connection)

    pool = await asyncpg.create_pool(url, init=init, reset=keep_session)
    return pool.acquire, pool.close


async def make_pool_generic(url: str, counted: Counted) -> tuple[Acquire, Callable[[], Any]]:
    init = counted_init(counted, producer.init_connection)
    settings = {"plan_cache_mode": "force_generic_plan"}
    pool = await asyncpg.create_pool(url, init=init, server_settings=settings)
    return pool.acquire, pool.close


async def make_pool_producer(url: str, counted: Counted) -> tuple[Acquire, Callable[[], Any]]:
    pool = await producer.create_pool(url, init=counted_init(counted))
    return pool.acquire, pool.close


async def keep_session(_conn: Any) -> None:
    """A pool's ``reset`` that sends nothing."""


def counted_init(
    counted: Counted, first: Callable[[Any], Awaitable[None]] | None = None
) -> Callable[[Any], Awaitable[None]]:
    """A pool's ``init``: ``first`` (a connection setup), then the query logger."""

    async def init(conn: Any) -> None:
        if first is not None:
            await first(conn)
        counted.attach(conn)

    return init


# The modes logged in as the database's owner (the runtime's login), not the producer's.
AS_OWNER = {"database", "pool_owner"}


async def make_database(url: str, counted: Counted) -> tuple[Acquire, Callable[[], Any]]:
    db = await Database.open(url, max_size=2)
    seen: set[int] = set()  # the backends whose connection has the logger

    @asynccontextmanager
    async def acquire() -> AsyncIterator[Any]:
        async with db.sessions.session(PROJECT) as conn:
            if conn.get_server_pid() not in seen:
                seen.add(conn.get_server_pid())
                counted.attach(conn)
            yield conn

    acquire.db = db  # type: ignore[attr-defined]
    return acquire, db.close


MODES: dict[str, Callable[[str, Counted], Awaitable[tuple[Acquire, Callable[[], Any]]]]] = {
    "database": make_database,
    "pool_owner": make_pool_producer,
    "connection": make_connection,
    "pool_docs": make_pool_docs,
    "pool_plain": make_pool_plain,
    "pool_noreset": make_pool_noreset,
    "pool_generic": make_pool_generic,
    "pool_producer": make_pool_producer,
    "pool_transaction": make_pool_producer,
}


def producer_series(mode: str, acquire: Acquire) -> Callable[[int, int], Awaitable[None]]:
    """``series(count, start)``: ``count`` runs submitted one per transaction, as ``mode``
    does (keys ``<tag>-<start>`` on, unique to this series function)."""
    settings = load_settings()
    tag = uuid.uuid4().hex[:8]

    async def series(count: int, start: int) -> None:
        for n in range(start, start + count):
            event = producer.ChannelEvent("api", f"{tag}-{n}", {"n": n})
            if mode == "database":
                await producer.submit(acquire.db, PROJECT, event, settings=settings)
            elif mode == "pool_transaction":
                async with acquire() as conn, producer.transaction(conn, PROJECT):
                    await producer.submit(conn, PROJECT, event, settings=settings)
            else:
                async with acquire() as conn, conn.transaction():
                    await producer.set_tenant(conn, PROJECT)
                    await producer.submit(conn, PROJECT, event, settings=settings)

    return series


# --- measuring ----------------------------------------------------------------------------------


# The plans the last connection's backend made of the ingest statement: custom plans are
# planned at every execution (the costly part of that statement), a generic plan once.
PLANS = """
SELECT sum(generic_plans) AS generic, sum(custom_plans) AS custom
FROM pg_prepared_statements WHERE statement LIKE '%ingest.insert_new%'
"""
TABLES = (
    "awooop_run_state",
    "awooop_events",
    "awooop_event_streams",
    "awooop_channel_event_dedupe",
)


async def fresh_tables(owner: Any, url: str, prefill: int) -> None:
    """Every measurement starts on the same tables: ``prefill`` runs (submitted in batches),
    then fresh statistics, as a service's database has (the runs stay PENDING: no worker
    takes them, and a statement's cost grows with them). On empty tables Postgres keeps a
    generic plan of the ingest statement on every connection; with real statistics it may
    not (``ingest_plans_last_connection``)."""
    await owner.execute(f"TRUNCATE {', '.join(TABLES)}")
    conn = await asyncpg.connect(url)
    try:
        for start in range(0, prefill, 1000):
            batch = [
                producer.ChannelEvent("api", f"prefill-{n}", {"n": n})
                for n in range(start, min(prefill, start + 1000))
            ]
            async with conn.transaction():
                await producer.set_tenant(conn, PROJECT)
                await producer.submit_many(conn, PROJECT, batch)
    finally:
        await conn.close()
    await owner.execute(f"ANALYZE {', '.join(TABLES)}")


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the backend ended
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


async def backends(owner: Any, role: str | None) -> list[int]:
    """The pids of ``role``'s backends (None: the owner's, but for ``owner`` itself)."""
    rows = await owner.fetch(
        "SELECT pid FROM pg_stat_activity WHERE usename = coalesce($1, current_user) "
        "AND datname = current_database() AND pid <> pg_backend_pid()",
        role,
    )
    return [r["pid"] for r in rows]


async def measure(
    mode: str,
    url: str,
    owner_url: str,
    owner: Any,
    role: str,
    runs: int,
    warmup: int,
    prefill: int,
) -> dict[str, Any]:
    counted = Counted()
    as_owner = mode in AS_OWNER
    acquire, close = await MODES[mode](owner_url if as_owner else url, counted)
    series = producer_series(mode, acquire)

    try:
        await fresh_tables(owner, url, prefill)
        if mode == "database":  # the sessions' one connection (sequential use), counted now on
            async with acquire():
                pass
        await series(warmup, 0)
        pids = await backends(owner, None if as_owner else role)
        counted.pause()  # no query logger while CPU is measured (statement_kinds.py)
        server_before, client_before = cpu_ticks(pids), time.process_time()
        started = time.perf_counter()
        await series(runs, warmup)
        seconds = time.perf_counter() - started
        client_s = time.process_time() - client_before
        server_s = (cpu_ticks(pids) - server_before) / TICK
        counted.resume()
        counted.kinds.clear()
        await series(warmup, warmup + runs)  # the statements, counted over as many more runs
        counted.pause()
        async with acquire() as conn:  # the connection that served last (asyncpg's pool: LIFO)
            plans = await conn.fetchrow(PLANS)
    finally:
        await close()
    return {
        "runs_per_s": round(runs / seconds, 1),
        "client_cpu_ms_per_run": round(client_s * 1000 / runs, 3),
        "backend_cpu_ms_per_run": round(server_s * 1000 / runs, 3),
        "stack_cpu_ms_per_run": round((client_s + server_s) * 1000 / runs, 3),
        "statements_per_run": round(sum(counted.kinds.values()) / warmup, 2),
        "statements_by_kind": {k: round(v / warmup, 2) for k, v in sorted(counted.kinds.items())},
        "backends": len(pids),
        "ingest_plans_last_connection": {k: int(v or 0) for k, v in plans.items()},
    }


FIGURES = (
    "runs_per_s",
    "client_cpu_ms_per_run",
    "backend_cpu_ms_per_run",
    "stack_cpu_ms_per_run",
    "statements_per_run",
)


def summary(
    rounds: list[dict[str, dict[str, Any]]], modes: list[str], figures: tuple[str, ...] = FIGURES
) -> dict[str, Any]:
    """Each mode's medians of ``figures`` over the rounds, and their ratios to the first mode's
    (producer_drivers.py reports its own figures through this too)."""
    medians = {
        mode: {f: statistics.median(r[mode][f] for r in rounds) for f in figures} for mode in modes
    }
    first = medians[modes[0]]
    return {
        "medians": medians,
        f"ratio_to_{modes[0]}": {
            mode: {f: round(m[f] / first[f], 3) if first[f] else None for f in figures}
            for mode, m in medians.items()
        },
    }


async def main(
    modes: list[str], runs: int, rounds: int, warmup: int, prefill: int
) -> dict[str, Any]:
    role = f"awooop_bench_{uuid.uuid4().hex[:10]}"
    results: list[dict[str, dict[str, Any]]] = []
    try:
        async with Scratch("producer_pool") as scratch:
            owner = await asyncpg.connect(scratch.url)
            try:
                await owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
                await tenants.grant(owner, role, [PROJECT])
                host = scratch.url.split("@", 1)[1]
                url = f"postgresql://{role}:pw-{role}@{host}"
                for index in range(rounds):
                    order = modes if index % 2 == 0 else list(reversed(modes))
                    one: dict[str, dict[str, Any]] = {}
                    for mode in order:
                        one[mode] = await measure(
                            mode, url, scratch.url, owner, role, runs, warmup, prefill
                        )
                        print(f"round {index + 1} {mode}: {one[mode]}", file=sys.stderr)
                    results.append(one)
            finally:
                await owner.close()
    finally:  # the scratch database is gone: nothing of the role is left
        server = await asyncpg.connect(SERVER)
        try:
            await server.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await server.close()
    return {
        "setup": dict(runs=runs, rounds=rounds, warmup=warmup, prefill=prefill, modes=modes),
        "summary": summary(results, modes),
        "rounds": results,
    }


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modes", default="database,pool_producer,pool_transaction,connection,pool_docs"
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--prefill", type=int, default=5000)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes {sorted(unknown)}: choose from {sorted(MODES)}")
    result = asyncio.run(main(modes, args.runs, args.rounds, args.warmup, args.prefill))
    report(result, "producer-pool")


if __name__ == "__main__":
    run()
