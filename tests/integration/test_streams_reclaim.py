"""Reclaim, touch and undecodable entries on a real Redis (R-16)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.eventlog import deadletters
from awooop.streams.envelope import FIELD, encode
from awooop.streams.keys import WORKER_GROUP, Keys
from awooop.streams.reclaim import autoclaim, touch
from tests.integration.test_streams_consumer import envelope


@pytest.fixture
async def stream(redis: Any, redis_prefix: str) -> str:
    """A work stream with 3 entries, all read (pending) by consumer "a"."""
    key = Keys(redis_prefix, 4).work_stream(1)
    await redis.xgroup_create(key, WORKER_GROUP, id="0", mkstream=True)
    for version in (1, 2, 3):
        await redis.xadd(key, {FIELD: encode(envelope(version))})
    await redis.xreadgroup(WORKER_GROUP, "a", {key: ">"})
    return key


async def owners(redis: Any, stream: str) -> dict[str, str]:
    rows = await redis.xpending_range(stream, WORKER_GROUP, "-", "+", 100)
    return {r["message_id"].decode(): r["consumer"].decode() for r in rows}


async def test_autoclaim_takes_idle_entries_and_reports_delivery_counts(
    redis: Any, stream: str
) -> None:
    assert await autoclaim(redis, stream, WORKER_GROUP, "b", min_idle_ms=60_000) == []
    await asyncio.sleep(0.05)  # the entries idle past min_idle_ms (here and below)
    first = await autoclaim(redis, stream, WORKER_GROUP, "b", min_idle_ms=20)
    assert [(d.envelope.version, d.delivery_count) for d in first] == [(1, 2), (2, 2), (3, 2)]
    assert set((await owners(redis, stream)).values()) == {"b"}
    await asyncio.sleep(0.05)
    again = await autoclaim(redis, stream, WORKER_GROUP, "c", min_idle_ms=20, count=2)
    assert [(d.envelope.version, d.delivery_count) for d in again] == [(1, 3), (2, 3)]
    assert all(d.group == WORKER_GROUP and d.stream == stream for d in again)


async def test_autoclaim_drops_entries_deleted_while_pending(redis: Any, stream: str) -> None:
    ids = list(await owners(redis, stream))
    await redis.xdel(stream, ids[0])
    await asyncio.sleep(0.03)
    with capture_logs() as logs:
        claimed = await autoclaim(redis, stream, WORKER_GROUP, "b", min_idle_ms=10)
    assert [d.entry_id for d in claimed] == ids[1:]
    assert any(e["event"] == "stream_pending_entries_deleted" for e in logs)
    assert ids[0] not in await owners(redis, stream)


async def test_touch_keeps_own_entries_fresh_and_never_steals(redis: Any, stream: str) -> None:
    ids = list(await owners(redis, stream))
    await asyncio.sleep(1.0)
    await touch(redis, stream, WORKER_GROUP, "a", ids[:2])
    # The untouched entries idle over 1 s; the touched ones look idle only if this process
    # stalls 800 ms between the two calls.
    claimed = await autoclaim(redis, stream, WORKER_GROUP, "b", min_idle_ms=800)
    assert [d.entry_id for d in claimed] == ids[2:]  # the touched two did not look idle
    # "a" touching the entry "b" now owns must not take it back.
    await touch(redis, stream, WORKER_GROUP, "a", ids)
    assert (await owners(redis, stream))[ids[2]] == "b"
    rows = await redis.xpending_range(stream, WORKER_GROUP, ids[0], ids[0], 1)
    assert rows[0]["times_delivered"] == 1  # touching counts no delivery


async def test_an_undecodable_entry_is_recorded_then_acknowledged(
    redis: Any, stream: str, redis_prefix: str, db: Database
) -> None:
    keys = Keys(redis_prefix, 4)
    bad = await redis.xadd(stream, {FIELD: b"\xff junk"})
    await redis.xreadgroup(WORKER_GROUP, "a", {stream: ">"})
    await asyncio.sleep(0.02)
    before = REGISTRY.get_sample_value("awooop_dead_letters_total") or 0.0
    claimed = await autoclaim(redis, stream, WORKER_GROUP, "b", min_idle_ms=10, keys=keys, db=db)
    assert len(claimed) == 3  # the decodable ones go to the caller
    assert REGISTRY.get_sample_value("awooop_dead_letters_total") == before + 1
    async with db.platform() as conn:
        [dead] = await deadletters.list_open(conn, PLATFORM_PROJECT)
    assert (dead.source_entry_id, dead.delivery_count, dead.message) == (
        bad.decode(),
        2,
        b"\xff junk",
    )
    assert bad.decode() not in await owners(redis, stream)
