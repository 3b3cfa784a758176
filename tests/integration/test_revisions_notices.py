"""The worker-side notice reader on real Redis (R-22, R-23): every notice, catch-up, resets."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from awooop.core.config import Settings
from awooop.revisions.notices import NoticeReader
from awooop.services import redis_client
from awooop.streams.envelope import FIELD, Notice
from awooop.streams.keys import Keys
from tests.support.revisions import notice, set_epoch, xadd_notice
from tests.support.services import private_redis, private_redis_cluster


class Recorder:
    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.resets: list[str] = []

    async def on_notice(self, item: Notice) -> None:
        self.notices.append(item)

    async def on_reset(self, reason: str) -> None:
        self.resets.append(reason)


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.redis_key_prefix, settings.shard_count)


def reader_for(redis: Any, keys: Keys, recorder: Recorder) -> NoticeReader:
    return NoticeReader(redis, keys, recorder.on_notice, recorder.on_reset, block_ms=50)


async def test_every_reader_sees_every_notice_in_order(redis: Any, keys: Keys) -> None:
    await set_epoch(redis, keys)
    recorders = [Recorder() for _ in range(3)]
    readers = [reader_for(redis, keys, r) for r in recorders]
    for reader in readers:
        await reader.prime()
    sent = [notice("p1", "policy_routing", f"c{i}", uuid.uuid4()) for i in range(5)]
    for item in sent:
        await xadd_notice(redis, keys, item)
    for reader in readers:
        assert await reader.poll() == 5
    for recorder in recorders:
        assert recorder.notices == sent  # not a group: nobody steals anybody's notices
        assert recorder.resets == []


async def test_a_reader_starts_at_the_end_of_the_stream(redis: Any, keys: Keys) -> None:
    await set_epoch(redis, keys)
    await xadd_notice(redis, keys, notice("p1", "policy_routing", "old", uuid.uuid4()))
    recorder = Recorder()
    reader = reader_for(redis, keys, recorder)
    await reader.prime()
    assert await reader.poll() == 0
    fresh = notice("p1", "policy_routing", "new", uuid.uuid4())
    await xadd_notice(redis, keys, fresh)
    assert await reader.poll() == 1
    assert recorder.notices == [fresh]


async def test_a_reader_that_was_away_catches_up(redis: Any, keys: Keys) -> None:
    await set_epoch(redis, keys)
    recorder = Recorder()
    reader = reader_for(redis, keys, recorder)
    await reader.prime()
    missed = [notice("p1", "policy_routing", "c", uuid.uuid4()) for _ in range(300)]
    for item in missed:  # the reader is not polling meanwhile (paused, or Redis unreachable)
        await xadd_notice(redis, keys, item)
    while await reader.poll():
        pass
    assert recorder.notices == missed
    assert recorder.resets == []


async def test_a_changed_epoch_is_a_reset(redis: Any, keys: Keys) -> None:
    await set_epoch(redis, keys, "one")
    recorder = Recorder()
    reader = reader_for(redis, keys, recorder)
    await reader.prime()
    await set_epoch(redis, keys, "two")
    await reader.poll()
    assert recorder.resets == ["epoch_changed"]
    await reader.poll()
    assert recorder.resets == ["epoch_changed"]  # once


async def test_a_vanished_stream_is_a_reset(redis: Any, keys: Keys) -> None:
    await set_epoch(redis, keys)
    recorder = Recorder()
    reader = reader_for(redis, keys, recorder)
    await reader.prime()
    await xadd_notice(redis, keys, notice("p1", "policy_routing", "c", uuid.uuid4()))
    assert await reader.poll() == 1
    await redis.delete(keys.notices_stream())
    await reader.poll()
    assert recorder.resets == ["stream_missing"]


async def test_a_stream_recreated_behind_the_readers_position_is_a_reset(
    redis: Any, keys: Keys
) -> None:
    await set_epoch(redis, keys)
    recorder = Recorder()
    reader = reader_for(redis, keys, recorder)
    await reader.prime()
    await xadd_notice(redis, keys, notice("p1", "policy_routing", "c", uuid.uuid4()))
    assert await reader.poll() == 1
    await redis.delete(keys.notices_stream())
    item = notice("p1", "policy_routing", "c", uuid.uuid4())
    await redis.xadd(keys.notices_stream(), {FIELD: b"x"}, id="1-1")  # older than ours
    await reader.poll()
    assert recorder.resets == ["id_beyond_stream"]
    await xadd_notice(redis, keys, item)
    await reader.poll()
    assert recorder.notices[-1] == item


async def test_an_undecodable_entry_is_skipped(redis: Any, keys: Keys) -> None:
    await set_epoch(redis, keys)
    recorder = Recorder()
    reader = reader_for(redis, keys, recorder)
    await reader.prime()
    await redis.xadd(keys.notices_stream(), {FIELD: b"\xc1garbage"})
    good = notice("p1", "policy_routing", "c", uuid.uuid4())
    await xadd_notice(redis, keys, good)
    assert await reader.poll() == 1
    assert recorder.notices == [good]


async def test_a_redis_restart_is_detected_and_reading_resumes(redis_prefix: str) -> None:
    keys = Keys(redis_prefix, 4)
    with private_redis() as server:
        client = aioredis.Redis.from_url(server.url)
        try:
            await set_epoch(client, keys)
            recorder = Recorder()
            reader = reader_for(client, keys, recorder)
            await reader.prime()
            await xadd_notice(client, keys, notice("p1", "policy_routing", "c", uuid.uuid4()))
            assert await reader.poll() == 1
            server.stop()
            with pytest.raises(RedisConnectionError):
                await reader.poll()
            server.start()  # empty: no persistence
            await reader.poll()
            assert recorder.resets == ["epoch_missing"]
            await set_epoch(client, keys)  # the relay writes a new epoch with the new stream
            after = notice("p1", "policy_routing", "c", uuid.uuid4())
            await xadd_notice(client, keys, after)
            await reader.poll()
            assert recorder.resets == ["epoch_missing", "epoch_changed"]
            await xadd_notice(client, keys, after)
            assert await reader.poll() == 1
            assert recorder.notices[-1] == after
        finally:
            await client.aclose()


async def test_the_reader_works_on_a_redis_cluster(redis_prefix: str) -> None:
    keys = Keys(redis_prefix, 4)
    with private_redis_cluster() as cluster:
        client = redis_client(cluster.url)
        try:
            await set_epoch(client, keys, "one")
            recorder = Recorder()
            reader = reader_for(client, keys, recorder)
            await reader.prime()
            sent = [notice("p1", "policy_routing", f"c{i}", uuid.uuid4()) for i in range(3)]
            for item in sent:
                await xadd_notice(client, keys, item)
            assert await reader.poll() == 3
            assert recorder.notices == sent
            await set_epoch(client, keys, "two")
            await reader.poll()
            assert recorder.resets == ["epoch_changed"]
        finally:
            await client.aclose()
