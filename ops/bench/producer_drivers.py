"""Benchmark: one submit per caller transaction on each driver the producer takes; an
interleaved comparison with asyncpg.

    .venv/bin/python ops/bench/producer_drivers.py [--runs 1000] [--rounds 3] [--warmup 100]
                                                  [--modes asyncpg,psycopg_async,...]

ONE client submits one run per transaction, sequentially, as a producer service does:
begin, ``set_tenant``, ``submit``, commit, logged in as a producer login bound to the project,
on a scratch database (migrated, dropped at the end) of AWOOOP_BENCH_PG_URL (default: the
local server). Modes (:data:`MODES`): ``asyncpg`` (one connection), ``psycopg_async`` and
``psycopg`` (one connection), ``sqlalchemy_asyncpg``, ``sqlalchemy_psycopg_async`` and
``sqlalchemy_psycopg`` (an ``AsyncSession`` / ``Session`` per transaction on the engine's
pool, as applications use them), ``django`` (``transaction.atomic()`` on Django's
connection). The sync modes run on a thread of their own (Django refuses a thread with a
running event loop).

Per mode and round: runs/s (wall) and the client process's CPU per run in ms
(``time.process_time``). Rounds run the modes in turn, the order reversed every other round;
``summary`` gives each mode's medians and their ratio to the first mode's. Prints the JSON
and writes it to ops/bench/results/producer-drivers-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import asyncpg  # noqa: E402
import producer_pool  # noqa: E402
from scratch import SERVER, Scratch, report  # noqa: E402

from awooop import producer  # noqa: E402
from awooop.core.config import load_settings  # noqa: E402
from awooop.ingest import tenants  # noqa: E402
from awooop.producer import sync  # noqa: E402
from tests.support.producer_drivers import configure_django, django_database  # noqa: E402

PROJECT = "bench"
SETTINGS = load_settings()


def event(tag: str, n: int) -> producer.ChannelEvent:
    return producer.ChannelEvent("api", f"{tag}-{n}", {"n": n})


async def asyncpg_series(url: str, tag: str, numbers: range) -> None:
    conn = await asyncpg.connect(url)
    try:
        for n in numbers:
            async with conn.transaction():
                await producer.set_tenant(conn, PROJECT)
                await producer.submit(conn, PROJECT, event(tag, n), settings=SETTINGS)
    finally:
        await conn.close()


async def psycopg_async_series(url: str, tag: str, numbers: range) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        for n in numbers:
            async with conn.transaction():
                await producer.set_tenant(conn, PROJECT)
                await producer.submit(conn, PROJECT, event(tag, n), settings=SETTINGS)


def sqlalchemy_async_series(scheme: str) -> Callable[..., Any]:
    async def series(url: str, tag: str, numbers: range) -> None:
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        engine = create_async_engine(scheme + url.split("://", 1)[1])
        try:
            for n in numbers:
                async with AsyncSession(engine) as session, session.begin():
                    await producer.set_tenant(session, PROJECT)
                    await producer.submit(session, PROJECT, event(tag, n), settings=SETTINGS)
        finally:
            await engine.dispose()

    return series


def psycopg_series(url: str, tag: str, numbers: range) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        for n in numbers:
            with conn.transaction():
                sync.set_tenant(conn, PROJECT)
                sync.submit(conn, PROJECT, event(tag, n), settings=SETTINGS)


def sqlalchemy_psycopg_series(url: str, tag: str, numbers: range) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
    try:
        for n in numbers:
            with Session(engine) as session, session.begin():
                sync.set_tenant(session, PROJECT)
                sync.submit(session, PROJECT, event(tag, n), settings=SETTINGS)
    finally:
        engine.dispose()


def django_series(url: str, tag: str, numbers: range) -> None:
    from django.db import connections, transaction

    configure_django()
    alias = f"bench{tag}"
    connections.settings[alias] = django_database(url)
    try:
        for n in numbers:
            with transaction.atomic(using=alias):
                sync.set_tenant(connections[alias], PROJECT)
                sync.submit(connections[alias], PROJECT, event(tag, n), settings=SETTINGS)
    finally:
        connections[alias].close()


MODES: dict[str, Callable[..., Any]] = {
    "asyncpg": asyncpg_series,
    "psycopg_async": psycopg_async_series,
    "sqlalchemy_asyncpg": sqlalchemy_async_series("postgresql+asyncpg://"),
    "sqlalchemy_psycopg_async": sqlalchemy_async_series("postgresql+psycopg://"),
    "psycopg": psycopg_series,
    "sqlalchemy_psycopg": sqlalchemy_psycopg_series,
    "django": django_series,
}


async def measure(mode: str, url: str, runs: int, warmup: int) -> dict[str, Any]:
    """``warmup`` submits, then ``runs`` timed ones, on one series (one connection or pool)."""
    tag = uuid.uuid4().hex[:8]
    series = MODES[mode]
    timed: dict[str, float] = {}

    def numbers() -> range:
        return range(warmup, warmup + runs)

    async def run_async() -> None:
        await series(url, tag, range(warmup))
        timed["cpu"], timed["wall"] = time.process_time(), time.perf_counter()
        await series(url, tag, numbers())

    def run_sync() -> None:
        series(url, tag, range(warmup))
        timed["cpu"], timed["wall"] = time.process_time(), time.perf_counter()
        series(url, tag, numbers())

    if asyncio.iscoroutinefunction(series):
        await run_async()
    else:
        await asyncio.to_thread(run_sync)
    seconds = time.perf_counter() - timed["wall"]
    client_s = time.process_time() - timed["cpu"]
    return {
        "runs_per_s": round(runs / seconds, 1),
        "client_cpu_ms_per_run": round(client_s * 1000 / runs, 3),
    }


FIGURES = ("runs_per_s", "client_cpu_ms_per_run")


def summary(rounds: list[dict[str, dict[str, Any]]], modes: list[str]) -> dict[str, Any]:
    return producer_pool.summary(rounds, modes, FIGURES)


async def main(modes: list[str], runs: int, rounds: int, warmup: int) -> dict[str, Any]:
    role = f"awooop_bench_{uuid.uuid4().hex[:10]}"
    results: list[dict[str, dict[str, Any]]] = []
    try:
        async with Scratch("producer_drivers") as scratch:
            owner = await asyncpg.connect(scratch.url)
            try:
                await owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
                await tenants.grant(owner, role, [PROJECT])
            finally:
                await owner.close()
            host = scratch.url.split("@", 1)[1]
            url = f"postgresql://{role}:pw-{role}@{host}"
            for index in range(rounds):
                order = modes if index % 2 == 0 else list(reversed(modes))
                one: dict[str, dict[str, Any]] = {}
                for mode in order:
                    one[mode] = await measure(mode, url, runs, warmup)
                    print(f"round {index + 1} {mode}: {one[mode]}", file=sys.stderr)
                results.append(one)
    finally:  # the scratch database is gone: nothing of the role is left
        server = await asyncpg.connect(SERVER)
        try:
            await server.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await server.close()
    return {
        "setup": {"runs": runs, "rounds": rounds, "warmup": warmup, "modes": modes},
        "summary": summary(results, modes),
        "rounds": results,
    }


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes {sorted(unknown)}: choose from {sorted(MODES)}")
    report(asyncio.run(main(modes, args.runs, args.rounds, args.warmup)), "producer-drivers")


if __name__ == "__main__":
    run()
