"""The dedupe table's windows (migrations/0112_partitioned_dedupe.sql) keep one run per key
within the TTL: across a window boundary, for a TTL longer than two windows, and when a
delivery loses the race in one of its two windows."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from awooop import producer
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.producer import ChannelEvent

PROJECT = "p1"

# A committed row of key $1 in the window $2 weeks from the current one (negative: before),
# for run $3, expiring in $4 hours: as a delivery whose clock was in that window leaves it.
PLANT = """
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, window_start, run_id, created_at, expires_at)
VALUES ('p1', 'api', $1, awooop_dedupe_window(now()) + make_interval(days => 7 * $2::int), $3,
        now(), now() + make_interval(hours => $4::int))
"""
ROWS = """
SELECT extract(epoch FROM window_start - awooop_dedupe_window(now())) / 604800 AS week, run_id
FROM awooop_channel_event_dedupe WHERE provider_event_id = $1 ORDER BY window_start
"""


async def plant(database_url: str, key: str, week: int, run_id: uuid.UUID, hours: int) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "SELECT awooop_ensure_dedupe_partitions(now() - interval '70 days', now())"
        )
        await conn.execute(PLANT, key, week, run_id, hours)
    finally:
        await conn.close()


async def rows_of(database_url: str, key: str) -> list[tuple[int, uuid.UUID]]:
    conn = await asyncpg.connect(database_url)
    try:
        return [(int(r["week"]), r["run_id"]) for r in await conn.fetch(ROWS, key)]
    finally:
        await conn.close()


async def test_a_first_delivery_claims_its_window_and_the_next(
    db: Database, database_url: str
) -> None:
    result = await producer.submit(db, PROJECT, ChannelEvent("api", "k1", {}))
    assert result.created
    assert await rows_of(database_url, "k1") == [(0, result.run_id), (1, result.run_id)]


async def test_a_delivery_whose_next_window_was_claimed_later_gets_that_run(
    db: Database, database_url: str
) -> None:
    # A delivery whose clock was already in the next window created the run; ours, with its
    # clock still in the current window, must not create another.
    winner = uuid.uuid4()
    await plant(database_url, "k2", 1, winner, 24)
    result = await producer.submit(db, PROJECT, ChannelEvent("api", "k2", {}))
    assert not result.created and result.run_id == winner
    assert await rows_of(database_url, "k2") == [(1, winner)]  # our half claim is gone


async def test_a_delivery_whose_current_window_was_claimed_gets_that_run(
    db: Database, database_url: str
) -> None:
    winner = uuid.uuid4()
    await plant(database_url, "k3", 0, winner, 24)
    result = await producer.submit(db, PROJECT, ChannelEvent("api", "k3", {}))
    assert not result.created and result.run_id == winner
    assert await rows_of(database_url, "k3") == [(0, winner)]


async def test_a_key_older_than_two_windows_is_found_within_a_long_ttl(
    db: Database, database_url: str
) -> None:
    await credentials.set_dedupe_ttl(db, PROJECT, "api", 30 * 24 * 3600)
    first = uuid.uuid4()
    await plant(database_url, "k4", -3, first, 48)  # three weeks ago, live for two more days
    result = await producer.submit(db, PROJECT, ChannelEvent("api", "k4", {}))
    assert not result.created and result.run_id == first
    assert await rows_of(database_url, "k4") == [(-3, first)]  # nothing claimed


async def test_an_expired_key_in_an_older_window_is_new_again(
    db: Database, database_url: str
) -> None:
    await credentials.set_dedupe_ttl(db, PROJECT, "api", 30 * 24 * 3600)
    old = uuid.uuid4()
    await plant(database_url, "k5", -2, old, -1)  # expired an hour ago
    result = await producer.submit(db, PROJECT, ChannelEvent("api", "k5", {}))
    assert result.created and result.run_id != old
    assert await rows_of(database_url, "k5") == [(-2, old), (0, result.run_id), (1, result.run_id)]


async def test_an_expired_key_in_the_current_window_is_new_again(
    db: Database, database_url: str
) -> None:
    old = uuid.uuid4()
    await plant(database_url, "k6", 0, old, -1)
    result = await producer.submit(db, PROJECT, ChannelEvent("api", "k6", {}))
    assert result.created and result.run_id != old
    assert await rows_of(database_url, "k6") == [(0, result.run_id), (1, result.run_id)]


@pytest.mark.connections(16)
async def test_concurrent_first_deliveries_make_one_run_and_two_rows(
    db: Database, database_url: str
) -> None:
    results = await asyncio.gather(
        *(producer.submit(db, PROJECT, ChannelEvent("api", "k7", {"n": n})) for n in range(50))
    )
    assert sum(r.created for r in results) == 1
    (run_id,) = {r.run_id for r in results}
    assert await rows_of(database_url, "k7") == [(0, run_id), (1, run_id)]
