"""The consumer-group toolkit on a real Redis (R-16, R-31, R-33)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.eventlog import deadletters
from awooop.streams.consumer import GroupConsumer
from awooop.streams.delivery import Delivery
from awooop.streams.envelope import FIELD, Envelope, encode
from awooop.streams.keys import Keys
from awooop.streams.reclaim import autoclaim
from tests.support.logcapture import capture_context_logs
from tests.support.streams import Collector, running_consumer
from tests.support.waiting import eventually

GROUP = "projector:test"


@pytest.fixture
def keys(redis_prefix: str) -> Keys:
    return Keys(redis_prefix, 4)  # Redis only: no database needed


def envelope(version: int = 1, stream_id: str | None = None, project: str = "p1") -> Envelope:
    return Envelope(
        event_id=uuid.uuid4(),
        position=version,
        tx_id=1,
        stream_id=stream_id or run_stream_id(uuid.uuid4()),
        version=version,
        project_id=project,
        event_type="RunCreated",
        payload=b"{}",
        recorded_at=datetime.now(UTC).timestamp(),
    )


async def add(redis: Any, stream: str, count: int, stream_id: str | None = None) -> list[str]:
    sid = stream_id or run_stream_id(uuid.uuid4())
    ids = []
    for version in range(1, count + 1):
        entry = await redis.xadd(stream, fields(version, sid))
        ids.append(entry.decode())
    return ids


def fields(version: int, stream_id: str) -> dict[str, bytes]:
    """A stream entry's fields: the envelope of event ``version`` of ``stream_id``."""
    return {FIELD: encode(envelope(version, stream_id))}


def consumer(
    redis: Any, keys: Keys, handler: Any, streams: list[str] | None = None, **kw: Any
) -> GroupConsumer:
    return GroupConsumer(
        redis,
        group=kw.pop("group", GROUP),
        consumer=kw.pop("name", "c1"),
        streams=streams or [keys.events_stream(0)],
        handler=handler,
        keys=keys,
        **kw,
    )


async def pending(redis: Any, stream: str, group: str = GROUP) -> int:
    summary = await redis.xpending(stream, group)
    return int(summary["pending"])


async def test_a_new_group_starts_at_0_and_acks_what_the_handler_accepts(
    redis: Any, keys: Keys
) -> None:
    stream = keys.events_stream(0)
    await add(redis, stream, 5)
    collector = Collector()
    group = consumer(redis, keys, collector)
    await group.ensure_groups()
    await group.ensure_groups()  # BUSYGROUP is fine
    assert await group.run_until_idle() == 5
    assert [d.envelope.version for d in collector.deliveries] == [1, 2, 3, 4, 5]
    assert all(d.delivery_count == 1 and d.group == GROUP for d in collector.deliveries)
    assert await pending(redis, stream) == 0
    assert await group.run_until_idle() == 0


async def test_false_or_an_exception_leaves_the_entry_pending(redis: Any, keys: Keys) -> None:
    stream = keys.events_stream(0)
    await add(redis, stream, 2)
    calls = 0

    async def handler(delivery: Delivery) -> bool:
        nonlocal calls
        calls += 1
        if delivery.envelope.version == 1:
            return False
        raise RuntimeError("boom")

    with capture_logs() as logs:
        handled = await consumer(redis, keys, handler).run_until_idle()
    assert handled == calls == 2
    assert await pending(redis, stream) == 2
    assert [e["event"] for e in logs].count("stream_handler_failed") == 1


async def test_in_flight_work_is_bounded(redis: Any, keys: Keys) -> None:
    streams = [keys.events_stream(0), keys.events_stream(1)]
    for stream in streams:
        await add(redis, stream, 20)
    running = peak = 0

    async def handler(_: Delivery) -> bool:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return True

    group = consumer(redis, keys, handler, streams=streams, max_in_flight=4, block_ms=50)
    async with running_consumer(group):
        await eventually(lambda: group.stats.acked == 40, what="all 40 entries acked")
    assert 1 < peak <= 4
    assert group.stats.handled == 40


async def test_stop_lets_in_flight_handlers_finish_and_flushes_acks(redis: Any, keys: Keys) -> None:
    stream = keys.events_stream(0)
    await add(redis, stream, 3)
    started = asyncio.Event()

    async def slow(_: Delivery) -> bool:
        started.set()
        await asyncio.sleep(0.3)
        return True

    group = consumer(redis, keys, slow, block_ms=50)
    async with running_consumer(group):
        await started.wait()
    assert group.stats.handled == 3
    assert await pending(redis, stream) == 0


async def test_a_lost_group_on_a_surviving_stream_is_recreated_at_the_last_id(
    redis: Any, keys: Keys
) -> None:
    """Same epoch, remembered last id: no flood of duplicates, nothing new missed."""
    stream = keys.events_stream(0)
    await redis.set(keys.epoch(0), "e1")
    await add(redis, stream, 10)
    collector = Collector()
    group = consumer(redis, keys, collector, block_ms=50)
    with capture_logs() as logs:
        async with running_consumer(group):
            await eventually(
                lambda: len(collector.deliveries) == 10, what="the first 10 deliveries"
            )
            # The 5 new entries land before the consumer notices: a group recreated at $
            # would miss them, one recreated at 0 would deliver the first 10 again.
            await redis.xgroup_destroy(stream, GROUP)
            await add(redis, stream, 5)
            await eventually(
                lambda: len(collector.deliveries) == 15,
                what="the 5 entries added after the group was lost",
            )
            await asyncio.sleep(0.3)  # room for a wrong redelivery of the first 10 to show
    assert len(collector.deliveries) == len(collector.event_ids()) == 15
    assert group.stats.nogroup == 1
    assert [e["event"] for e in logs].count("stream_group_missing") == 1


async def test_nogroup_without_an_epoch_recreates_at_0_and_does_not_spin(
    redis: Any, keys: Keys
) -> None:
    """Redis lost everything (no epoch): the group comes back at 0 of the new stream, and the
    consumer does not hot-loop on NOGROUP while the data is gone."""
    stream = keys.events_stream(0)
    await redis.set(keys.epoch(0), "e1")
    await add(redis, stream, 3)
    collector = Collector()
    group = consumer(redis, keys, collector, block_ms=50)
    with capture_logs() as logs:
        async with running_consumer(group):
            await eventually(lambda: len(collector.deliveries) == 3, what="the first 3 deliveries")
            await redis.delete(stream, keys.epoch(0))
            await asyncio.sleep(0.3)  # the consumer reads while the data is gone
            await add(redis, stream, 4)  # whatever arrives after the loss is delivered
            await eventually(
                lambda: len(collector.deliveries) == 7, what="the 4 entries added after the loss"
            )
            await asyncio.sleep(0.5)  # the window in which a NOGROUP spin would show
    assert group.stats.nogroup <= 2
    assert [e["event"] for e in logs].count("stream_group_missing") <= 2
    assert any(e["event"] == "stream_epoch_missing" for e in logs)


async def test_a_first_start_on_an_empty_redis_is_not_reported_as_data_loss(
    redis: Any, keys: Keys
) -> None:
    """No epoch was ever written (a new install: the relay has not initialised the shard yet):
    an info line, no warning. Once the consumer has seen an epoch, its loss is a warning."""
    stream = keys.events_stream(0)
    collector = Collector()
    group = consumer(redis, keys, collector, block_ms=50)
    with capture_context_logs() as logs:
        async with running_consumer(group):
            await add(redis, stream, 2)
            await eventually(lambda: len(collector.deliveries) == 2, what="the deliveries")
            await group.check_epochs()
    events = [e["event"] for e in logs]
    assert "stream_epoch_not_yet_written" in events
    assert "stream_epoch_missing" not in events
    assert not [e for e in logs if e["log_level"] == "warning"], logs


async def test_a_new_epoch_calls_on_reset_and_restarts_at_0(redis: Any, keys: Keys) -> None:
    stream = keys.events_stream(2)
    await redis.set(keys.epoch(2), "e1")
    await add(redis, stream, 2)
    resets: list[int] = []

    async def on_reset(shard: int) -> None:
        resets.append(shard)

    collector = Collector()
    group = consumer(
        redis, keys, collector, streams=[stream], block_ms=50, epoch_check_ms=50, on_reset=on_reset
    )
    async with running_consumer(group):
        await eventually(lambda: len(collector.deliveries) == 2, what="the first 2 deliveries")
        # What a relay rebuild leaves: new stream, group created at 0, new epoch. In one
        # MULTI: a read of the consumer's between the DEL and the XGROUP CREATE would find
        # NOGROUP and create the group itself (then this CREATE fails with BUSYGROUP).
        sid = run_stream_id(uuid.uuid4())
        async with redis.pipeline(transaction=True) as rebuild:
            rebuild.delete(stream)
            rebuild.xgroup_create(stream, GROUP, id="0", mkstream=True)
            for version in (1, 2, 3):
                rebuild.xadd(stream, fields(version, sid))
            rebuild.set(keys.epoch(2), "e2")
            await rebuild.execute()
        await eventually(
            lambda: len(collector.deliveries) == 5 and resets == [2],
            what="the 3 entries of the new epoch and one reset of shard 2",
        )
    assert group.stats.resets == 1


async def test_an_undecodable_entry_is_recorded_as_a_dead_letter(
    redis: Any, keys: Keys, db: Database
) -> None:
    stream, kept = keys.work_stream(1), keys.work_stream(2)
    first = await redis.xadd(stream, {FIELD: b"\xff not msgpack"})
    await redis.xadd(stream, {"other": "field"})
    await redis.xadd(kept, {"other": "field"})
    blind = consumer(redis, keys, Collector(), streams=[kept], group="workers")
    assert await blind.run_until_idle() == 0
    assert await pending(redis, kept, "workers") == 1  # no Postgres to record it: kept pending
    group = consumer(redis, keys, Collector(), streams=[stream], group="workers", db=db)
    assert await group.run_until_idle() == 0
    async with db.platform() as conn:
        dead = await deadletters.list_open(conn, PLATFORM_PROJECT)
    assert sorted(d.reason.split(":")[0] for d in dead) == [
        "no envelope field",
        "undecodable envelope",
    ]
    [raw] = [d for d in dead if d.source_entry_id == first.decode()]
    assert (raw.message, raw.source, raw.group_name, raw.run_id) == (
        b"\xff not msgpack",
        "work",
        "workers",
        None,
    )
    assert await pending(redis, stream, "workers") == 0


async def test_touch_keeps_long_handlers_from_being_reclaimed(redis: Any, keys: Keys) -> None:
    stream = keys.work_stream(0)
    await add(redis, stream, 1)
    release = asyncio.Event()
    started = asyncio.Event()

    async def long_handler(_: Delivery) -> bool:
        started.set()
        await release.wait()
        return True

    group = consumer(
        redis, keys, long_handler, streams=[stream], block_ms=50, touch_interval_ms=100
    )
    async with running_consumer(group):
        await started.wait()
        # Touched every 100 ms, asked for once idle 1 s, for 1.5 s: a loaded machine can stall
        # this process for a few hundred milliseconds without the thief getting the entry.
        for _ in range(15):
            await asyncio.sleep(0.1)
            assert await autoclaim(redis, stream, GROUP, "thief", min_idle_ms=1000) == []
        release.set()
    assert await pending(redis, stream) == 0


async def test_reclaim_takes_over_entries_a_dead_consumer_left(redis: Any, keys: Keys) -> None:
    stream = keys.work_stream(3)
    await add(redis, stream, 2)
    dead = Collector(ok=False)
    assert await consumer(redis, keys, dead, streams=[stream], name="dead").run_until_idle() == 2
    survivor = Collector()
    group = consumer(
        redis, keys, survivor, streams=[stream], name="alive", block_ms=50, reclaim_idle_ms=200
    )
    async with running_consumer(group):
        await eventually(
            lambda: len(survivor.deliveries) == 2,
            what="the dead consumer's 2 entries delivered to the survivor",
        )
    assert [d.delivery_count for d in survivor.deliveries] == [2, 2]
    assert await pending(redis, stream) == 0


LEAK = AttributeError("'NoneType' object has no attribute 'writelines'")


class LeaksOnce:
    """The real client, except that the first ``method`` call (for ``pipeline``: the first
    pipeline's execute) raises what redis-py 8.1 leaks instead of a ConnectionError when it
    writes to a connection the server has reset (seen after a cluster master restart;
    redis/redis-py#4287)."""

    def __init__(self, client: Any, method: str) -> None:
        self._client = client
        self._method = method
        self.leaks = 1

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        if name != self._method or name == "pipeline" or not self.leaks:
            return real
        self.leaks -= 1

        async def leak(*_args: Any, **_kwargs: Any) -> Any:
            raise LEAK

        return leak

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self._client.pipeline(*args, **kwargs)
        if self._method == "pipeline" and self.leaks:
            self.leaks -= 1

            async def execute(*_args: Any, **_kwargs: Any) -> Any:
                raise LEAK

            pipe.execute = execute
        return pipe


async def test_a_failed_ack_flush_of_any_kind_does_not_stop_later_acks(
    redis: Any, keys: Keys
) -> None:
    stream = keys.events_stream(0)
    leaky = LeaksOnce(redis, "pipeline")
    group = consumer(leaky, keys, Collector(), block_ms=50, epoch_check_ms=60_000)
    async with running_consumer(group):
        await add(redis, stream, 3)
        await eventually(
            lambda: group.stats.handled == 3 and leaky.leaks == 0,
            what="3 handled and the failing ack flush spent",
        )
        await add(redis, stream, 3)
        await eventually(lambda: group.stats.handled == 6, what="6 handled")
        await eventually(lambda: group.stats.acked >= 3, what="3 acks: the ack loop survived")
    # The entries of the failed flush stay pending (reclaim takes them); none after it.
    assert await pending(redis, stream) == 6 - group.stats.acked
    assert group.stats.acked >= 3


async def test_a_failed_group_check_of_any_kind_at_start_is_retried(redis: Any, keys: Keys) -> None:
    stream = keys.events_stream(0)
    await add(redis, stream, 2)
    leaky = LeaksOnce(redis, "evalsha")  # the first ENSURE_GROUP call
    group = consumer(leaky, keys, Collector(), block_ms=50)
    async with running_consumer(group):
        await eventually(lambda: group.stats.handled == 2, what="2 handled")
    assert leaky.leaks == 0
