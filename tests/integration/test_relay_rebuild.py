"""Trimming below what groups need, the safe replay point, and rebuilding a lost shard (R-33).

Losing a shard is simulated by deleting this test's keys (its own prefix) on the shared Redis;
the FLUSHALL and restart variants run on private servers in test_relay_chaos.py.
"""

from __future__ import annotations

from typing import Any

import msgspec
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.streams.consumer import GroupConsumer
from awooop.streams.keys import WORKER_GROUP, Keys, projector_group
from awooop.streams.relay import Relay
from tests.support.streams import Collector, claim, create_run, keys_for

PROJECT = "p1"


async def lose_everything(redis: Any, keys: Keys) -> None:
    doomed = [k async for k in redis.scan_iter(match=f"{keys.prefix}:*", count=1000)]
    await redis.delete(*doomed)


def group_on(
    redis: Any, keys: Keys, stream: str, group: str, collector: Collector
) -> GroupConsumer:
    return GroupConsumer(
        redis, group=group, consumer="c", streams=[stream], handler=collector, keys=keys
    )


async def test_trim_keeps_every_entry_a_group_still_needs(
    settings: Settings, db: Database, redis: Any
) -> None:
    small = msgspec.structs.replace(settings, stream_maxlen=50, relay_batch_size=500)
    keys = keys_for(small)
    shard = keys.shard_of(PROJECT)
    events, work = keys.events_stream(shard), keys.work_stream(shard)
    relay = Relay(settings=small, redis=redis, keys=keys)
    fast, slow = Collector(), Collector()
    try:
        await relay.drain()  # creates the shard (epoch, workers group)
        await group_on(redis, keys, events, projector_group("fast"), fast).ensure_groups()
        slow_group = group_on(redis, keys, events, projector_group("slow"), slow)
        await slow_group.ensure_groups()
        for _ in range(600):
            await create_run(db, PROJECT)
        await relay.drain()
        assert await redis.xlen(events) == 600
        await group_on(redis, keys, events, projector_group("fast"), fast).run_until_idle()
        # The slow group reads 300 entries and acknowledges none of the last 100.
        replies = await redis.xreadgroup(projector_group("slow"), "c", {events: ">"}, count=300)
        read_ids = [entry_id for entry_id, _ in replies[0][1]]
        await redis.xack(events, projector_group("slow"), *read_ids[:200])
        await relay.trim()
        remaining = [entry_id for entry_id, _ in await redis.xrange(events)]
        assert set(read_ids[200:]) <= set(remaining)  # every pending entry survives
        assert len(remaining) >= 400  # ... and so do the 300 unread ones
        assert len(remaining) < 600  # whole macro nodes below the floor went
        # Nobody reads the work stream but "workers" exists and has read nothing: no trim.
        assert await redis.xlen(work) == 600
        # A stream without groups is only capped (MAXLEN ~ 50).
        await redis.xgroup_destroy(work, WORKER_GROUP)
        await relay.trim()
        assert await redis.xlen(work) < 200
    finally:
        await relay.close()


async def test_a_lost_shard_is_rebuilt_from_the_safe_point_and_dispatchable_runs(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    shard = keys.shard_of(PROJECT)
    events, work = keys.events_stream(shard), keys.work_stream(shard)
    relay = Relay(settings=settings, redis=redis, keys=keys)
    projected, worked = Collector(), Collector()
    projector = group_on(redis, keys, events, projector_group("p"), projected)
    worker = GroupConsumer(
        redis, group=WORKER_GROUP, consumer="w", streams=[work], handler=worked, keys=keys
    )
    try:
        old_runs = [await create_run(db, PROJECT) for _ in range(3)]
        await claim(db, PROJECT, old_runs[0])  # RUNNING: not redispatched
        await relay.drain()
        assert await projector.run_until_idle() == 4
        assert await worker.run_until_idle() == 3
        await relay.trim()  # records the safe point: everything so far was acknowledged
        async with db.platform_writes() as conn:
            safe = await conn.fetchrow(
                "SELECT safe_tx_id, safe_position FROM awooop_relay_shards "
                "WHERE shard_count = $1 AND shard = $2",
                keys.shard_count,
                shard,
            )
        assert safe["safe_tx_id"] is not None
        new_runs = [await create_run(db, PROJECT) for _ in range(2)]
        await relay.drain()  # published, but nobody reads them before Redis loses them
        old_epoch = await redis.get(keys.epoch(shard))

        await lose_everything(redis, keys)
        await relay.drain()  # notices the missing epoch and rebuilds
        assert (await redis.get(keys.epoch(shard))) not in (None, old_epoch)
        groups = {g["name"].decode() for g in await redis.xinfo_groups(events)}
        assert groups == {projector_group("p")}  # recreated: the relay had seen it

        projected.deliveries.clear()
        worked.deliveries.clear()
        await projector.run_until_idle()
        await worker.run_until_idle()
        # Exactly what no group had acknowledged when the safe point was taken, again.
        replayed = [d.envelope.stream_id for d in projected.deliveries]
        assert sorted(replayed) == sorted(run_stream_id(r) for r in new_runs)
        assert all(d.envelope.attempt == 1 for d in projected.deliveries)
        # Workers get every PENDING run (old and new), not the RUNNING one.
        dispatched = {d.envelope.stream_id for d in worked.deliveries}
        assert dispatched == {run_stream_id(r) for r in [*old_runs[1:], *new_runs]}
        async with db.platform() as conn:
            row = await conn.fetchrow(
                "SELECT epoch, resets FROM awooop_relay_shards WHERE shard_count = $1 "
                "AND shard = $2",
                keys.shard_count,
                shard,
            )
        assert row["epoch"] == (await redis.get(keys.epoch(shard))).decode()
        assert row["resets"] == 1  # the first start initialised the shard: not a reset
    finally:
        await relay.close()


async def test_a_fresh_install_initialises_every_shard_and_reports_no_reset(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    before = REGISTRY.get_sample_value("awooop_stream_resets_total") or 0.0
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        await relay.drain()  # a fresh database and key prefix: no shard has an epoch yet
        for shard in keys.shards():
            assert await redis.get(keys.epoch(shard)) is not None  # initialised
        assert (REGISTRY.get_sample_value("awooop_stream_resets_total") or 0.0) == before
        async with db.platform() as conn:
            resets = await conn.fetch(
                "SELECT shard, resets, epoch FROM awooop_relay_shards WHERE shard_count = $1",
                keys.shard_count,
            )
        assert len(resets) == keys.shard_count
        assert all(r["resets"] == 0 and r["epoch"] for r in resets), resets

        await lose_everything(redis, keys)  # now a loss: counted, once per shard
        await relay.drain()
        after = REGISTRY.get_sample_value("awooop_stream_resets_total") or 0.0
        assert after - before == keys.shard_count
    finally:
        await relay.close()
