"""Relay and consumer toolkit on a private Redis Cluster (a shard's keys share one slot)."""

from __future__ import annotations

import msgspec

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.services import redis_client
from awooop.streams.consumer import GroupConsumer
from awooop.streams.keys import WORKER_GROUP, projector_group
from awooop.streams.reclaim import autoclaim
from awooop.streams.relay import Relay
from tests.support.services import private_redis_cluster
from tests.support.streams import Collector, committed_event_ids, create_run, keys_for


async def test_relay_rebuild_and_groups_work_across_cluster_slots(
    settings: Settings, db: Database
) -> None:
    projects = [f"cl{i}" for i in range(12)]
    with private_redis_cluster() as cluster:
        clustered = msgspec.structs.replace(settings, redis_url=cluster.url)
        redis = redis_client(cluster.url)
        keys = keys_for(clustered)
        relay = Relay(settings=clustered, redis=redis, keys=keys)
        projected, worked = Collector(), Collector(ok=False)
        projector = GroupConsumer(
            redis,
            group=projector_group("c"),
            consumer="p",
            streams=[keys.events_stream(s) for s in keys.shards()],
            handler=projected,
            keys=keys,
        )
        worker = GroupConsumer(
            redis,
            group=WORKER_GROUP,
            consumer="w",
            streams=[keys.work_stream(s) for s in keys.shards()],
            handler=worked,
            keys=keys,
        )
        try:
            assert len(projector._read_sets) == keys.shard_count  # one read per slot
            for project in projects:
                await create_run(db, project)
            await relay.drain()
            await projector.run_until_idle()
            await worker.run_until_idle()  # leaves everything pending
            committed = await committed_event_ids(db)
            assert projected.event_ids() == committed == worked.event_ids()
            reclaimed = [
                d
                for s in keys.shards()
                for d in await autoclaim(redis, keys.work_stream(s), WORKER_GROUP, "w2", 0)
            ]
            assert {d.envelope.event_id for d in reclaimed} == committed
            assert {d.delivery_count for d in reclaimed} == {2}
            await relay.trim()
            # Lose one shard's keys (all in one slot) and let the relay rebuild it.
            shard = keys.shard_of(projects[0])
            await redis.delete(keys.epoch(shard))
            await relay.drain()
            assert await redis.get(keys.epoch(shard)) is not None
        finally:
            await relay.close()
            await redis.aclose()
