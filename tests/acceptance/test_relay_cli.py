"""``awooop relay`` as a process: publishes, serves metrics, stops cleanly, survives kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from typing import Any

import httpx

from awooop.config import Settings
from awooop.db import Database
from streams.envelope import FIELD, decode_envelope
from streams.relay import Relay
from tests.support.services import free_port
from tests.support.streams import committed_event_ids, create_run, eventually, keys_for


def relay_env(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_REDIS_URL": settings.redis_url,
        "AWOOOP_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "AWOOOP_RELAY_POLL_INTERVAL_S": "0.2",
        "AWOOOP_LOG_LEVEL": "info",
        "OTEL_TRACES_EXPORTER": "none",
        **extra,
    }


async def start_relay(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awooop.cli",
        "relay",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def event_ids_in_redis(redis: Any, stream: str) -> Counter[Any]:
    return Counter(decode_envelope(f[FIELD]).event_id for _, f in await redis.xrange(stream))


async def test_relay_command_publishes_serves_metrics_and_stops_on_sigterm(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    port = free_port()
    proc = await start_relay(relay_env(settings, AWOOOP_METRICS_PORT=str(port)))
    stream = keys.events_stream(keys.shard_of("p1"))
    try:
        await create_run(db, "p1")

        async def published() -> bool:
            assert proc.returncode is None, "relay exited"
            return bool(await redis.xlen(stream))

        await eventually(published)
        async with httpx.AsyncClient() as client:
            body = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
        assert 'awooop_relay_published_total{outbox="events"} 1.0' in body
        assert "awooop_background_loop_last_run_timestamp" in body
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        assert proc.stderr is not None
        stderr = (await proc.stderr.read()).decode()
        assert '"event": "relay_stopped"' in stderr
    finally:
        await stop(proc)
    # It gave the lock back: another relay leads at once.
    successor = Relay(settings=settings, redis=redis, keys=keys)
    try:
        assert await successor.drain() == 0
        assert successor.is_leader
    finally:
        await successor.close()


async def test_kill_9_mid_stream_then_restart_delivers_every_event(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    env = relay_env(settings, AWOOOP_RELAY_BATCH_SIZE="5")
    stream = keys.events_stream(keys.shard_of("p1"))
    first = await start_relay(env)
    try:
        producing = asyncio.gather(*(create_run(db, "p1") for _ in range(60)))

        async def some_published() -> bool:
            return int(await redis.xlen(stream)) >= 10

        await eventually(some_published, interval=0.01)
        first.kill()  # SIGKILL: no cleanup at all
        await first.wait()
        await producing
    finally:
        await stop(first)
    second = await start_relay(env)
    try:
        committed = await committed_event_ids(db)
        counts: Counter[Any] = Counter()

        async def all_published() -> bool:
            counts.clear()
            counts.update(await event_ids_in_redis(redis, stream))
            return set(counts) == committed

        await eventually(all_published, within_s=60, interval=0.1)
    finally:
        second.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(second.wait(), 15)
        await stop(second)
    assert set(counts) == committed
    # A duplicate at most, from the batch in flight when the first relay died.
    assert max(counts.values()) <= 2, sorted(counts.values())
