"""Relay crashes and concurrent relays: at least once, per-run order (R-22, R-31)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.streams.consumer import GroupConsumer
from awooop.streams.keys import WORKER_GROUP, Keys, projector_group
from awooop.streams.relay import Relay
from tests.support.streams import (
    Collector,
    claim,
    committed_event_ids,
    create_run,
    first_occurrences,
    keys_for,
    running_consumer,
    running_relay,
    step,
)
from tests.support.waiting import eventually


class Crash(Exception):
    """The simulated death of the relay process."""


def projector(redis: Any, keys: Keys, name: str, collector: Collector) -> GroupConsumer:
    return GroupConsumer(
        redis,
        group=projector_group(name),
        consumer=f"{name}-1",
        streams=[keys.events_stream(s) for s in keys.shards()],
        handler=collector,
        keys=keys,
        block_ms=100,
    )


async def test_a_crash_between_xadd_and_the_cursor_update_gives_duplicates_never_loss(
    settings: Settings, db: Database, redis: Any
) -> None:
    keys = keys_for(settings)
    for project in ("pa", "pb", "pc"):
        for _ in range(4):
            await create_run(db, project)
    collector = Collector()
    group = projector(redis, keys, "crash", collector)
    await group.ensure_groups()

    async def die_after_first_publish(point: str) -> None:
        if point == "published":
            raise Crash

    doomed = Relay(settings=settings, redis=redis, keys=keys, fault_hook=die_after_first_publish)
    with pytest.raises(Crash):
        await doomed.drain()
    await doomed.close()  # the process is gone: its lease is released (or runs out)
    async with db.platform() as conn:
        row = await conn.fetchrow("SELECT * FROM awooop_relay_cursor WHERE name = 'events'")
    assert (row["tx_id"], row["position"], row["published"]) == (0, 0, 0)
    assert await group.run_until_idle() == 12  # the batch did reach Redis

    successor = Relay(settings=settings, redis=redis, keys=keys)
    try:
        assert await successor.drain() == 12
    finally:
        await successor.close()
    assert await group.run_until_idle() == 12

    counts = Counter(d.envelope.event_id for d in collector.deliveries)
    assert set(counts) == await committed_event_ids(db)
    assert set(counts.values()) == {2}  # each event at most twice, never zero times


@pytest.mark.connections(15)
async def test_eight_producers_fifty_runs_two_relays_every_group_sees_every_event_in_order(
    settings: Settings, db: Database, redis: Any
) -> None:
    """8 concurrent producers write the events of 50 runs while 2 relay processes run; the
    active one is killed halfway. Two projector groups and the workers group each see every
    event meant for them, and each run's events in version order."""
    fast = msgspec.structs.replace(settings, relay_poll_interval_s=0.1, relay_batch_size=50)
    keys = keys_for(fast)
    projects = [f"proj{i}" for i in range(6)]
    runs: list[tuple[str, uuid.UUID]] = []
    rng = random.Random(7)

    async def producer(index: int) -> None:
        mine = []
        for n in range(index, 50, 8):
            project = projects[n % len(projects)]
            run_id = await create_run(db, project)
            await claim(db, project, run_id)
            mine.append((project, run_id))
            runs.append((project, run_id))
            await asyncio.sleep(rng.uniform(0, 0.01))
        for n in range(25):
            project, run_id = rng.choice(runs)
            await step(db, project, run_id, f"p{index}-s{n}")
            await asyncio.sleep(rng.uniform(0, 0.005))

    projector_a, projector_b, workers = Collector(), Collector(), Collector()
    consumers = [
        projector(redis, keys, "a", projector_a),
        projector(redis, keys, "b", projector_b),
        GroupConsumer(
            redis,
            group=WORKER_GROUP,
            consumer="w1",
            streams=[keys.work_stream(s) for s in keys.shards()],
            handler=workers,
            keys=keys,
            block_ms=100,
        ),
    ]
    relays = [Relay(settings=fast, redis=redis, keys=keys, relay_id=f"r{i}") for i in (1, 2)]
    async with (
        running_consumer(consumers[0]),
        running_consumer(consumers[1]),
        running_consumer(consumers[2]),
        running_relay(relays[0], fast),
        running_relay(relays[1], fast) as second_loop,
    ):
        producing = asyncio.gather(*(producer(i) for i in range(8)))
        await eventually(
            lambda: len(projector_a.deliveries) > 100,
            what="more than 100 deliveries to projector a",
        )
        # Kill the active relay mid-stream; the other one must take over.
        leader = next(r for r in relays if r.is_leader)
        await leader.close()
        standby = next(r for r in relays if r is not leader)
        await producing
        await eventually(
            lambda: standby.is_leader or leader.is_leader,
            what="a leader after the active relay was closed",
        )
        committed = await committed_event_ids(db)
        async with db.platform() as conn:
            dispatch = {
                r["event_id"]
                for r in await conn.fetch(
                    "SELECT event_id FROM awooop_events WHERE event_type = 'RunCreated'"
                )
            }
        await eventually(
            lambda: (
                projector_a.event_ids() == committed
                and projector_b.event_ids() == committed
                and workers.event_ids() == dispatch
            ),
            timeout_s=60,
            what="every committed event at both projectors and every RunCreated at the workers",
        )
        assert not second_loop.done()

    assert len(committed) == 50 * 2 + 8 * 25
    for collector in (projector_a, projector_b):
        for stream_id, versions in collector.versions_by_stream().items():
            assert first_occurrences(versions) == sorted(set(versions)), stream_id
            assert sorted(set(versions)) == list(range(1, max(versions) + 1)), stream_id
    assert all(set(versions) == {1} for versions in workers.versions_by_stream().values())
