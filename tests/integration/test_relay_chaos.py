"""Losing Redis: FLUSHALL and a stopped server, on PRIVATE Redis servers only (R-22, R-33)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY
from redis.exceptions import RedisError
from structlog.testing import capture_logs

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.streams.consumer import GroupConsumer
from awooop.streams.envelope import FIELD, decode_notice
from awooop.streams.keys import WORKER_GROUP, Keys, projector_group
from awooop.streams.relay import Relay
from tests.support.services import private_redis
from tests.support.streams import (
    Collector,
    committed_event_ids,
    create_run,
    keys_for,
    running_consumer,
    running_relay,
)
from tests.support.waiting import eventually

PROJECTS = [f"chaos{i}" for i in range(8)]


def consumers(redis: Any, keys: Keys) -> tuple[GroupConsumer, Collector, GroupConsumer, Collector]:
    projected, worked = Collector(), Collector()
    projector = GroupConsumer(
        redis,
        group=projector_group("chaos"),
        consumer="p1",
        streams=[keys.events_stream(s) for s in keys.shards()],
        handler=projected,
        keys=keys,
        block_ms=100,
        epoch_check_ms=200,
    )
    worker = GroupConsumer(
        redis,
        group=WORKER_GROUP,
        consumer="w1",
        streams=[keys.work_stream(s) for s in keys.shards()],
        handler=worked,
        keys=keys,
        block_ms=100,
        epoch_check_ms=200,
    )
    return projector, projected, worker, worked


async def produce(db: Database, stop: asyncio.Event, rng: random.Random) -> int:
    made = 0
    while not stop.is_set():
        await create_run(db, rng.choice(PROJECTS))
        made += 1
        await asyncio.sleep(rng.uniform(0.005, 0.02))
    return made


async def created_event_ids(db: Database) -> set[Any]:
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT event_id FROM awooop_events WHERE event_type = 'RunCreated'"
        )
    return {r["event_id"] for r in rows}


async def test_flushall_while_producers_relay_and_groups_run_loses_nothing(
    settings: Settings, db: Database
) -> None:
    with private_redis() as server:
        chaos = msgspec.structs.replace(
            settings,
            redis_url=server.url,
            relay_poll_interval_s=0.1,
            relay_trim_interval_s=0.2,
            relay_batch_size=20,
        )
        redis = aioredis.Redis.from_url(server.url)
        keys = keys_for(chaos)
        projector, projected, worker, worked = consumers(redis, keys)
        resets: list[int] = []

        async def on_reset(shard: int) -> None:
            resets.append(shard)

        projector.on_reset = on_reset
        relay = Relay(settings=chaos, redis=redis, keys=keys)
        rng = random.Random(3)
        try:
            with capture_logs() as logs:
                async with (
                    running_relay(relay, chaos),
                    running_consumer(projector),
                    running_consumer(worker),
                ):
                    stop = asyncio.Event()
                    producing = asyncio.gather(*(produce(db, stop, rng) for _ in range(3)))
                    try:
                        await eventually(
                            lambda: len(projected.deliveries) >= 20,
                            what="20 deliveries to the projector",
                        )
                        await redis.flushall()  # producers, relay and groups all running
                        await asyncio.sleep(1.5)  # everything keeps running through the loss
                    finally:
                        stop.set()
                        made = sum(await producing)
                    committed = await committed_event_ids(db)
                    assert len(committed) == made
                    await eventually(
                        lambda: (
                            projected.event_ids() == committed and worked.event_ids() == committed
                        ),
                        timeout_s=60,
                        what="every committed event at both groups after the flush",
                    )
                    await asyncio.sleep(0.5)  # time for a NOGROUP loop to show, if there were one
            for shard in keys.shards():
                assert await redis.get(keys.epoch(shard)) is not None
        finally:
            await redis.aclose()
    nogroup_lines = [e for e in logs if e["event"] == "stream_group_missing"]
    assert projector.stats.nogroup + worker.stats.nogroup <= 2 * keys.shard_count
    assert len(nogroup_lines) <= 2 * keys.shard_count
    assert [e for e in logs if e["event"] == "stream_shard_rebuilt"]
    assert sorted(set(resets)) == sorted({keys.shard_of(p) for p in PROJECTS})


@pytest.mark.long(15)
async def test_redis_stopped_ten_seconds_the_relay_catches_up_and_counts_attempts(
    settings: Settings, db: Database
) -> None:
    with private_redis() as server:
        chaos = msgspec.structs.replace(
            settings, redis_url=server.url, relay_poll_interval_s=0.2, relay_trim_interval_s=0.2
        )
        redis = aioredis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
        keys = keys_for(chaos)
        projector, projected, worker, worked = consumers(redis, keys)
        relay = Relay(settings=chaos, redis=redis, keys=keys)
        errors_before = (
            REGISTRY.get_sample_value(
                "awooop_relay_attempts_total", {"outbox": "events", "result": "error"}
            )
            or 0.0
        )
        try:
            async with (
                running_relay(relay, chaos),
                running_consumer(projector),
                running_consumer(worker),
            ):
                for project in PROJECTS:
                    await create_run(db, project)
                await eventually(
                    lambda: len(projected.deliveries) == len(PROJECTS),
                    what="one delivery per project",
                )
                server.stop()
                down_since = time.monotonic()
                while time.monotonic() - down_since < 10:
                    await create_run(db, random.choice(PROJECTS))
                    await asyncio.sleep(0.5)
                server.start()
                committed = await committed_event_ids(db)
                await eventually(
                    lambda: projected.event_ids() == committed and worked.event_ids() == committed,
                    timeout_s=60,
                    what="every committed event at both groups after the restart",
                )
        finally:
            await redis.aclose()
    async with db.platform() as conn:
        row = await conn.fetchrow("SELECT * FROM awooop_relay_cursor WHERE name = 'events'")
    assert row["relay_failures"] >= 1
    assert row["relay_attempts"] > row["relay_failures"]
    assert row["last_error"]
    errors_after = REGISTRY.get_sample_value(
        "awooop_relay_attempts_total", {"outbox": "events", "result": "error"}
    )
    assert errors_after is not None and errors_after > errors_before
    assert len(committed) >= len(PROJECTS) + 15


async def test_notices_survive_redis_outages_and_a_relay_crash(
    settings: Settings, db: Database
) -> None:
    """R-22: a notice committed while Redis is down is delivered later with its attempts
    counted; a relay that dies between XADD and the delivered mark sends it again."""
    from tests.integration.test_relay_publish import insert_notice

    with private_redis() as server:
        chaos = msgspec.structs.replace(settings, redis_url=server.url)
        redis = aioredis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
        keys = keys_for(chaos)
        try:
            server.stop()
            event_id = await insert_notice(db)
            relay = Relay(settings=chaos, redis=redis, keys=keys)
            for _ in range(2):
                try:
                    await relay.drain(timeout_s=5)
                except RedisError:
                    pass
                else:
                    raise AssertionError("published with Redis down")
            async with db.platform() as conn:
                row = await conn.fetchrow(
                    "SELECT delivered_at, relay_attempts FROM awooop_contract_outbox "
                    "WHERE event_id = $1",
                    event_id,
                )
            assert row["delivered_at"] is None
            assert row["relay_attempts"] == 2
            await relay.close()

            server.start()

            class Crash(Exception):
                pass

            async def die(point: str) -> None:
                if point == "notices_published":
                    raise Crash

            doomed = Relay(settings=chaos, redis=redis, keys=keys, fault_hook=die)
            with contextlib.suppress(Crash):
                await doomed.drain()
            await doomed.close()
            successor = Relay(settings=chaos, redis=redis, keys=keys)
            try:
                await successor.drain()
            finally:
                await successor.close()
            delivered = [
                decode_notice(fields[FIELD]).event_id
                for _, fields in await redis.xrange(keys.notices_stream())
            ]
            assert delivered == [event_id, event_id]  # once more after the crash, never lost
            async with db.platform() as conn:
                row = await conn.fetchrow(
                    "SELECT delivered_at, relay_attempts FROM awooop_contract_outbox "
                    "WHERE event_id = $1",
                    event_id,
                )
            assert row["delivered_at"] is not None
            assert row["relay_attempts"] == 3  # two refused, one delivered (the crashed one
            # reached Redis but was never marked: it counts nowhere)
        finally:
            await redis.aclose()
