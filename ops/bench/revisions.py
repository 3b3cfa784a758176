"""Benchmark of the revision path: notice latency and the cost of the pre-call pointer check.

    .venv/bin/python ops/bench/revisions.py [--readers 10] [--notices 200] [--checks 3000]

Prints one JSON document:
- ``notice_latency``: from the activation's commit, through the outbox relay, to the moment ALL
  ``--readers`` workers (gateways with their own notice reader and cache) have applied the
  notice (p50/p99 ms). Target: p99 <= 50 ms. Uses the real relay (``awooop.streams.relay``) when it
  is installed; otherwise a stand-in publishes each outbox row right after the commit and the
  XADD -> all readers time is reported too.
- ``pointer_check``: the pre-call pointer check on a cache hit (p50/p99 ms), a bare
  ``SELECT 1`` round trip on the same kind of connection for scale, and the check's share of a
  1 ms fake model call; ``complete_added``: end-to-end ``complete()`` minus the bare 1 ms model
  call. Target: pointer check p50 <= 0.2 ms.

It uses a scratch database (created, migrated, dropped) on ``AWOOOP_BENCH_DATABASE_URL`` /
``AWOOOP_TEST_DATABASE_URL`` (default the local server) and a unique key prefix on
``AWOOOP_BENCH_REDIS_URL`` / ``AWOOOP_TEST_REDIS_URL`` (default the local Redis); it never
flushes anything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from awooop.core.config import load_settings
from awooop.core.logs import configure_logging
from awooop.core.loops import run_loop
from awooop.core.migrate import migrate
from awooop.core.pools import APP_ROLE, connect
from awooop.llm.client import ModelRequest
from awooop.llm.gateway import ModelGateway
from awooop.llm.local import LocalModel
from awooop.revisions.service import Revisions
from awooop.services import Services, redis_client
from awooop.streams.envelope import FIELD, Notice, encode

P, FAMILY, CONTRACT = "bench", "policy_routing", "default"
UNDELIVERED = """
SELECT event_id, event_type, project_id, contract_family, contract_id, old_revision_id,
       new_revision_id, traceparent, extract(epoch FROM created_at)::float8 AS created_at
FROM awooop_contract_outbox WHERE delivered_at IS NULL ORDER BY created_at
"""
MARK = "UPDATE awooop_contract_outbox SET delivered_at = now() WHERE event_id = ANY($1)"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 4)

    return {
        "n": len(ordered),
        "p50_ms": pick(0.50),
        "p99_ms": pick(0.99),
        "max_ms": round(ordered[-1] * 1000, 4),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 4),
    }


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def relay_available() -> bool:
    return importlib.util.find_spec("awooop.streams.relay") is not None


async def start_relay(services: Services) -> tuple[Any, asyncio.Event, asyncio.Task[None]]:
    """The real outbox relay as its loop (NOTIFY wake-up at commit), in this process."""
    from awooop.loops.relay import relay_spec
    from awooop.streams.relay import Relay

    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(relay_spec(relay, services.settings), stop))
    for _ in range(1000):
        if relay.is_leader and await services.redis.exists(services.keys.notices_epoch()):
            break
        await asyncio.sleep(0.01)
    return relay, stop, task


async def stand_in_publish(services: Services) -> float:
    """XADD the undelivered outbox rows like the relay does; returns the time of the XADD."""
    async with services.db.platform_writes() as conn:
        rows = await conn.fetch(UNDELIVERED)
        published = time.time()
        for row in rows:
            notice = Notice(**dict(row.items()))
            await services.redis.xadd(services.keys.notices_stream(), {FIELD: encode(notice)})
        await conn.execute(MARK, [row["event_id"] for row in rows])
    return published


async def notice_latency(services: Services, readers: int, notices: int) -> dict[str, Any]:
    revisions = Revisions(services.db)
    a = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    b = await revisions.create(P, FAMILY, CONTRACT, {"model": "b"})
    real_relay = relay_available()
    relay: Any = None
    if real_relay:
        relay, stop, task = await start_relay(services)
    else:
        await services.redis.set(services.keys.notices_epoch(), uuid.uuid4().hex)
    gateways = [ModelGateway(services) for _ in range(readers)]
    seen: dict[uuid.UUID, list[float]] = {}
    arrived = asyncio.Event()

    def observe(item: Notice, at: float) -> None:
        times = seen.setdefault(item.new_revision_id, [])
        times.append(at)
        if len(times) == readers:
            arrived.set()

    for gateway in gateways:
        gateway.reader.observer = observe
        await gateway.start()
    commit_to_all: list[float] = []
    xadd_to_all: list[float] = []
    try:
        for i in range(notices):
            target = (a, b)[i % 2]
            seen.pop(target.revision_id, None)
            arrived.clear()
            await revisions.activate(P, FAMILY, CONTRACT, target.revision_id)
            committed = time.time()
            published = None if real_relay else await stand_in_publish(services)
            await asyncio.wait_for(arrived.wait(), timeout=10)
            last = max(seen[target.revision_id])
            commit_to_all.append(last - committed)
            if published is not None:
                xadd_to_all.append(last - published)
    finally:
        for gateway in gateways:
            await gateway.close()
        if relay is not None:
            stop.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await relay.close()
    result: dict[str, Any] = {
        "readers": readers,
        "relay": "awooop.streams.relay.Relay (real, NOTIFY wake-up)"
        if real_relay
        else "stand-in: the benchmark XADDs each outbox row right after the commit "
        "(awooop.streams.relay not available)",
        "commit_to_all_readers": percentiles(commit_to_all),
        "target_p99_ms": 50,
    }
    if xadd_to_all:
        result["xadd_to_all_readers"] = percentiles(xadd_to_all)
    return result


async def pointer_cost(services: Services, checks: int) -> dict[str, Any]:
    revisions = Revisions(services.db)
    r = await revisions.create(P, FAMILY, "hot", {"model": "m"})
    await revisions.activate(P, FAMILY, "hot", r.revision_id)
    gateway = ModelGateway(services)
    await gateway.start()
    conn = await connect(services.settings.database_url, role=APP_ROLE)
    select_one = await conn.prepare("SELECT 1")
    model = LocalModel("local:?delay_ms=1")
    request = ModelRequest(model="m", prompt="x")
    try:
        for _ in range(200):  # warm: connections open, statements prepared, cache filled
            await gateway.get_effective_policy(P, FAMILY, "hot")
            await select_one.fetchval()
        check: list[float] = []
        round_trip: list[float] = []
        for _ in range(checks):
            started = time.perf_counter()
            await gateway.get_effective_policy(P, FAMILY, "hot")
            check.append(time.perf_counter() - started)
            started = time.perf_counter()
            await select_one.fetchval()
            round_trip.append(time.perf_counter() - started)
        fake_call: list[float] = []
        complete: list[float] = []
        gateway._slot.client = model  # white-box: the same 1 ms model behind complete()
        for _ in range(min(checks, 1000)):
            started = time.perf_counter()
            await model.generate(request)
            fake_call.append(time.perf_counter() - started)
            started = time.perf_counter()
            await gateway.complete(P, "x", contract=(FAMILY, "hot"))
            complete.append(time.perf_counter() - started)
    finally:
        await conn.close()
        await gateway.close()
    check_p50 = statistics.median(check)
    return {
        "cache_hit_check": percentiles(check),
        "select_1_round_trip": percentiles(round_trip),
        "fake_llm_call_1ms": percentiles(fake_call),
        "complete_with_1ms_model": percentiles(complete),
        "complete_added_p50_ms": round(
            (statistics.median(complete) - statistics.median(fake_call)) * 1000, 4
        ),
        "check_share_of_1ms_call_p50": round(check_p50 / statistics.median(fake_call), 4),
        "target_p50_ms": 0.2,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = (
        os.environ.get("AWOOOP_BENCH_DATABASE_URL")
        or os.environ.get("AWOOOP_TEST_DATABASE_URL")
        or "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    redis_url = (
        os.environ.get("AWOOOP_BENCH_REDIS_URL")
        or os.environ.get("AWOOOP_TEST_REDIS_URL")
        or "redis://127.0.0.1:6379/0"
    )
    name = f"awooop_bench_rev_{uuid.uuid4().hex[:8]}"
    database_url = with_database(server, name)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    await migrate(database_url)
    settings = load_settings(
        environ={}, database_url=database_url, redis_url=redis_url, redis_key_prefix=prefix
    )
    services = await Services.open(settings, db_pool_size=4)
    try:
        notices = await notice_latency(services, args.readers, args.notices)
        pointer = await pointer_cost(services, args.checks)
    finally:
        await services.close()
        redis = redis_client(redis_url)
        keys = [k async for k in redis.scan_iter(match=f"{prefix}*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
        admin = await asyncpg.connect(with_database(server, "postgres"))
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return {
        "benchmark": "revisions",
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "notice_latency": notices,
        "pointer_check": pointer,
        "targets_met": {
            "notice_p99_le_50ms": notices["commit_to_all_readers"]["p99_ms"] <= 50,
            "pointer_check_p50_le_0_2ms": pointer["cache_hit_check"]["p50_ms"] <= 0.2,
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--notices", type=int, default=200)
    parser.add_argument("--checks", type=int, default=3000)
    configure_logging("warning", stream=sys.stderr)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
