"""``awooop relay`` as a process: publishes, serves metrics, stops cleanly, survives kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.streams.envelope import FIELD, decode_envelope
from awooop.streams.relay import Relay
from tests.support.services import free_port
from tests.support.streams import (
    claim,
    committed_event_ids,
    create_run,
    first_occurrences,
    keys_for,
    step,
)
from tests.support.waiting import eventually


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


async def start_relay(env: dict[str, str], stderr: Any = None) -> asyncio.subprocess.Process:
    """An ``awooop relay`` process; its log goes to ``stderr`` (a file) or a pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awooop.cli",
        "relay",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr if stderr is not None else asyncio.subprocess.PIPE,
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

        await eventually(published, what="the relay publishes its first event")
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


@pytest.mark.connections(18)
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

        await eventually(
            some_published, interval_s=0.01, what="10 events published by the first relay"
        )
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

        await eventually(
            all_published,
            timeout_s=60,
            interval_s=0.1,
            what="every committed event published once the second relay took over",
        )
    finally:
        second.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(second.wait(), 15)
        await stop(second)
    assert set(counts) == committed
    # A duplicate at most, from the batch in flight when the first relay died.
    assert max(counts.values()) <= 2, sorted(counts.values())


async def leader_pid(db: Database) -> int | None:
    """The pid in the relay lease's holder (``host:pid:random``), None when nobody holds it."""
    async with db.platform() as conn:
        holder = await conn.fetchval(
            "SELECT holder FROM awooop_leaders WHERE name = 'relay' AND lease_until > now()"
        )
    return None if holder is None else int(holder.split(":")[1])


@pytest.mark.connections(15)
async def test_kill_stop_of_the_leader_a_standby_publishes_within_the_lease_and_the_old_steps_down(
    settings: Settings, db: Database, redis: Any, tmp_path: Path
) -> None:
    """R-19: SIGSTOP the leading ``awooop relay``: the standby publishes within
    AWOOOP_RELAY_LEADER_LEASE_S + AWOOOP_RELAY_POLL_INTERVAL_S (the documented bound); after
    SIGCONT the old leader steps down (its log says so) and stays a standby. Meanwhile
    producers keep committing: every committed event is in Redis, each run's first copies in
    version order, no version skipped."""
    lease_s, poll_s = 3.0, 0.2
    env = relay_env(
        settings,
        AWOOOP_RELAY_LEADER_LEASE_S=str(lease_s),
        AWOOOP_RELAY_LEADER_RENEW_S="0.5",
        AWOOOP_RELAY_POLL_INTERVAL_S=str(poll_s),
        AWOOOP_RELAY_BATCH_SIZE="20",
    )
    keys = keys_for(settings)
    projects = [f"stop{i}" for i in range(4)]
    logs = {name: tmp_path / f"{name}.log" for name in ("first", "second")}
    files = {name: path.open("wb") for name, path in logs.items()}
    first = await start_relay(env, files["first"])
    second: asyncio.subprocess.Process | None = None
    stop_producing = asyncio.Event()

    async def produce(index: int) -> None:
        n = 0
        while not stop_producing.is_set():
            project = projects[(index + n) % len(projects)]
            run_id = await create_run(db, project)
            await claim(db, project, run_id)
            await step(db, project, run_id, "s")
            n += 1
            await asyncio.sleep(0.01)

    async def in_redis(event_ids: set[uuid.UUID]) -> bool:
        seen: set[uuid.UUID] = set()
        for shard in keys.shards():
            seen |= set(await event_ids_in_redis(redis, keys.events_stream(shard)))
        return event_ids <= seen

    producers: list[asyncio.Task[None]] = []
    try:

        async def first_leads() -> bool:
            assert first.returncode is None, "relay exited"
            return await leader_pid(db) == first.pid

        await eventually(first_leads, timeout_s=30, what="the first relay leads")
        second = await start_relay(env, files["second"])
        await eventually(
            lambda: _logged(logs["second"], "relay_standby"),
            timeout_s=30,
            what="the second relay logs relay_standby",
        )
        producers = [asyncio.create_task(produce(i)) for i in range(2)]
        await eventually(lambda: _some_published(redis, keys), what="20 events published")

        os.kill(first.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        marker = await create_run(db, projects[0])
        async with db.platform() as conn:
            marker_events = {
                r["event_id"]
                for r in await conn.fetch(
                    "SELECT event_id FROM awooop_events WHERE stream_id = $1",
                    run_stream_id(marker),
                )
            }
        assert len(marker_events) == 1
        await eventually(
            lambda: in_redis(marker_events),
            timeout_s=60,
            interval_s=0.05,
            what="the marker run's event in Redis, from the new leader",
        )
        took_over_s = time.monotonic() - stopped_at
        assert await leader_pid(db) == second.pid

        os.kill(first.pid, signal.SIGCONT)
        await eventually(
            lambda: _logged(logs["first"], "relay_leadership_lost"),
            timeout_s=30,
            what="the first relay logs relay_leadership_lost",
        )
        await eventually(
            lambda: _logged(logs["first"], "relay_standby"),
            timeout_s=30,
            what="the first relay logs relay_standby",
        )
        stop_producing.set()
        await asyncio.gather(*producers)
        committed = await committed_event_ids(db)
        await eventually(
            lambda: in_redis(committed),
            timeout_s=60,
            interval_s=0.1,
            what="every committed event in Redis",
        )
        assert first.returncode is None and second.returncode is None
        assert await leader_pid(db) == second.pid
    finally:
        stop_producing.set()
        await asyncio.gather(*producers, return_exceptions=True)
        for proc in (first, second):
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            await stop(proc)
        for f in files.values():
            f.close()

    # The documented bound, plus room for a loaded machine (process start-up is not in it).
    assert took_over_s < lease_s + poll_s + 5.0, took_over_s
    assert not await _logged(logs["second"], "relay_leadership_lost")
    versions: dict[str, list[int]] = defaultdict(list)
    for shard in keys.shards():
        for _, fields in await redis.xrange(keys.events_stream(shard)):
            envelope = decode_envelope(fields[FIELD])
            versions[envelope.stream_id].append(envelope.version)
    assert len(versions) > 10
    for stream_id, seen in versions.items():
        assert first_occurrences(seen) == sorted(set(seen)), stream_id
        assert sorted(set(seen)) == list(range(1, max(seen) + 1)), stream_id


async def _logged(path: Path, event: str) -> bool:
    """Whether the process log at ``path`` has a line of ``event`` (read off the loop)."""
    text = await asyncio.to_thread(path.read_text, errors="replace")
    return f'"event": "{event}"' in text


async def _some_published(redis: Any, keys: Any) -> bool:
    lengths = [int(await redis.xlen(keys.events_stream(s))) for s in keys.shards()]
    return sum(lengths) >= 20
