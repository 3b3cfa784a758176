"""The chaos soak: deliveries with duplicates while workers are SIGKILLed, Redis is flushed and
restarted, and Postgres is restarted once; then the invariants.

Everything runs against PRIVATE Postgres and Redis servers (awooop.demo.servers), never the shared
ones. The short variant runs in CI; ``-m slow`` with AWOOOP_SOAK_EVENTS=2000 (and optionally
AWOOOP_SOAK_SECONDS) is the long manual variant. Invariants checked at the end:
every accepted key has exactly one run; every run is terminal and none FAILED; exactly one
RunCompleted per completed run; no journaled step completed twice; every consumer group
drained; and ``awooop replay run_state --verify`` finds no difference.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis

from awooop.demo.processes import Processes
from awooop.demo.servers import free_port
from tests.support.http import wait_ready
from tests.support.services import private_postgres, private_redis

PROJECT = "soak"
HANDLER = "awooop.examples.handlers:handle"


async def soak(events: int, tmp_path: Path) -> dict[str, Any]:
    rng = random.Random(7)
    stats: Counter[str] = Counter()
    with private_postgres() as pg, private_redis() as rd:
        database_url = pg.url.rsplit("/", 1)[0] + "/soak"
        port = free_port()
        procs = Processes(
            {
                "AWOOOP_DATABASE_URL": database_url,
                "AWOOOP_REDIS_URL": rd.url,
                "AWOOOP_HTTP_PORT": str(port),
                "AWOOOP_LEASE_TTL_S": "3",
                "AWOOOP_HEARTBEAT_INTERVAL_S": "0.5",
                "AWOOOP_REAPER_INTERVAL_S": "1",
                "AWOOOP_RECLAIM_INTERVAL_S": "1",
                "AWOOOP_RELAY_POLL_INTERVAL_S": "0.2",
                "AWOOOP_MAX_ATTEMPTS": "20",
                "AWOOOP_SHUTDOWN_GRACE_S": "3",
                "AWOOOP_LOG_LEVEL": "warning",
                "AWOOOP_LLM_URL": "local:",
            },
            tmp_path / "logs",
        )
        code, _, err = await procs.run("migrate")
        assert code == 0, err
        code, out, err = await procs.run("tokens", "create", PROJECT, "--channel", "api")
        assert code == 0, err
        token = out.strip().splitlines()[0]
        await procs.start("serve", "serve")
        await procs.start("relay", "relay")
        await procs.start("loops", "loops", "run")
        workers = 0

        async def start_worker() -> None:
            nonlocal workers
            workers += 1
            await procs.start(f"worker-{workers}", "worker", "--handler", HANDLER)

        for _ in range(4):
            await start_worker()
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5)
        accepted: dict[str, str] = {}

        async def deliver(key: str, body: dict[str, Any]) -> None:
            headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
            for _ in range(600):  # retry through restarts: the key makes retries safe
                try:
                    answer = await http.post(
                        f"/v1/projects/{PROJECT}/channels/api", json=body, headers=headers
                    )
                except httpx.HTTPError:
                    stats["http_errors"] += 1
                    await asyncio.sleep(0.1)
                    continue
                if answer.status_code in (200, 202):
                    run_id = (
                        str(answer.json()["run_ids"][0])
                        if answer.status_code == 202
                        else str(answer.json()["run_id"])
                    )
                    assert accepted.setdefault(key, run_id) == run_id
                    stats["accepted" if answer.status_code == 202 else "duplicates"] += 1
                    return
                stats[f"http_{answer.status_code}"] += 1
                await asyncio.sleep(0.1)
            raise AssertionError(f"delivery {key} never accepted")

        await wait_ready(http)

        async def traffic() -> None:
            keys = [str(uuid.uuid4()) for _ in range(events)]
            sends = []
            for i, key in enumerate(keys):
                body = {"text": f"soak {i}", "work_s": 0.3 if i % 10 == 0 else 0}
                for _ in range(1 + rng.randrange(3)):  # duplicates
                    sends.append((key, body))
            rng.shuffle(sends)
            pending: set[asyncio.Task[None]] = set()
            for key, body in sends:
                pending.add(asyncio.create_task(deliver(key, body)))
                if len(pending) >= 16:
                    _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                await asyncio.sleep(0.005)
            await asyncio.gather(*pending)

        async def chaos() -> None:
            actions = ["kill", "kill", "kill", "kill", "flush", "restart_redis", "restart_pg"]
            rng.shuffle(actions)
            for action in actions:
                await asyncio.sleep(rng.uniform(1.0, 2.5))
                if action == "kill":
                    victims = [c for c in procs.alive() if c.name.startswith("worker-")]
                    procs.kill(rng.choice(victims))
                    await start_worker()
                elif action == "flush":
                    client = aioredis.Redis.from_url(rd.url)
                    await client.flushall()
                    await client.aclose()
                elif action == "restart_redis":
                    await asyncio.to_thread(rd.restart)
                else:
                    await asyncio.to_thread(pg.restart)
                stats[action] += 1

        await asyncio.gather(traffic(), chaos())
        conn = await connect_retrying(database_url)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                live = await conn.fetchval(
                    "SELECT count(*) FROM awooop_run_state "
                    "WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')"
                )
                if live == 0:
                    break
                await asyncio.sleep(0.5)
            result = await invariants(conn, rd.url, accepted)
        finally:
            await conn.close()
        code, out, err = await procs.run("replay", "run_state", "--verify")
        result["verify_exit"] = code
        result["verify_output"] = (out + err)[-500:]
        await http.aclose()
        codes = await procs.stop_all()
        result["stats"] = dict(stats)
        result["exit_codes"] = codes
        return result


async def connect_retrying(url: str) -> Any:
    for _ in range(100):
        try:
            return await asyncpg.connect(url)
        except (OSError, asyncpg.PostgresError):
            await asyncio.sleep(0.2)
    raise AssertionError("postgres did not come back")


async def invariants(conn: Any, redis_url: str, accepted: dict[str, str]) -> dict[str, Any]:
    dedupe = {
        r["provider_event_id"]: str(r["run_id"])
        for r in await conn.fetch(
            "SELECT provider_event_id, run_id FROM awooop_channel_event_dedupe"
        )
    }
    states = Counter(r["status"] for r in await conn.fetch("SELECT status FROM awooop_run_state"))
    completions = await conn.fetch(
        "SELECT stream_id, count(*) AS n FROM awooop_events WHERE event_type = 'RunCompleted' "
        "GROUP BY stream_id HAVING count(*) > 1"
    )
    steps = await conn.fetch(
        "SELECT stream_id, data->>'step' AS step, count(*) AS n FROM awooop_events "
        "WHERE event_type = 'StepCompleted' GROUP BY 1, 2 HAVING count(*) > 1"
    )
    runs = await conn.fetchval("SELECT count(*) FROM awooop_run_state")
    failures = Counter(
        f"{r['failure_code']}: {r['failure_reason']}"
        for r in await conn.fetch(
            "SELECT failure_code, failure_reason FROM awooop_run_state WHERE status = 'FAILED'"
        )
    )
    # Entries delivered to killed workers stay pending until a live worker reclaims them
    # (idle longer than the lease) and reconciles them with Postgres (finished -> XACK):
    # the groups drain eventually, not at the moment the last run finished.
    client = aioredis.Redis.from_url(redis_url)
    undrained: list[Any] = []
    try:
        for _ in range(120):
            undrained = []
            async for key in client.scan_iter(match="*:work"):
                for group in await client.xinfo_groups(key):
                    if group["pending"] or (group.get("lag") or 0):
                        undrained.append((key, group["name"], group["pending"], group.get("lag")))
            if not undrained:
                break
            await asyncio.sleep(0.5)
    finally:
        await client.aclose()
    return {
        "accepted_keys": len(accepted),
        "one_run_per_key": dedupe == accepted and runs == len(accepted),
        "states": dict(states),
        "failures": dict(failures),
        "all_terminal": set(states) <= {"COMPLETED", "FAILED", "CANCELLED"},
        "completed_twice": len(completions),
        "steps_twice": len(steps),
        "undrained_groups": undrained,
    }


def check(result: dict[str, Any]) -> None:
    assert result["one_run_per_key"], result
    assert result["all_terminal"], result
    # Chaos in the runtime's own services fails no run (a handler that found Postgres away
    # gives its attempt back; max_attempts is 20 here)
    assert result["failures"] == {}, result
    assert result["completed_twice"] == 0, result
    assert result["steps_twice"] == 0, result
    assert result["undrained_groups"] == [], result
    assert result["verify_exit"] == 0, result
    assert result["stats"]["kill"] == 4 and result["stats"]["restart_pg"] == 1, result


@pytest.mark.long(25)
async def test_chaos_soak_short(tmp_path: Path) -> None:
    result = await soak(
        events=int(os.environ.get("AWOOOP_SOAK_EVENTS_SHORT", "120")), tmp_path=tmp_path
    )
    print(result)
    check(result)


@pytest.mark.slow
async def test_chaos_soak_long(tmp_path: Path) -> None:
    result = await soak(events=int(os.environ.get("AWOOOP_SOAK_EVENTS", "2000")), tmp_path=tmp_path)
    print(result)
    check(result)
