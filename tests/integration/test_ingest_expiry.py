"""Dedupe expiry (R-04): the platform loop keeps the dedupe table's windows ahead of the clock and
drops a window once every row in it has expired (awooop.eventlog.dedupe_windows)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
import msgspec
from prometheus_client import REGISTRY

from awooop import producer
from awooop.core.config import Settings
from awooop.core.loops import LoopCategory, LoopContext
from awooop.eventlog import dedupe_windows as windows
from awooop.eventlog import partition_ddl
from awooop.ingest import credentials
from awooop.loops import dedupe_expiry as expiry
from awooop.loops.registry import all_loops
from awooop.producer import ChannelEvent
from awooop.services import Services

PROJECT = "p1"

# Rows in the window `$1` weeks before the current one, expired ($2 false) or live.
FILL = """
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, window_start, run_id, created_at, expires_at)
SELECT 'p' || (g % 7), 'api', $3 || g,
       awooop_dedupe_window(now()) - make_interval(days => 7 * $1::int), gen_random_uuid(),
       now() - make_interval(days => 7 * $1::int),
       CASE WHEN $2::bool THEN now() + interval '1 day' ELSE now() - interval '1 hour' END
FROM generate_series(1, $4::int) AS g
"""
OLD_WINDOWS = "SELECT awooop_ensure_dedupe_partitions(now() - interval '70 days', now())"


def _with(settings: Settings, **changes: Any) -> Settings:
    return msgspec.structs.replace(settings, **changes)


async def admin_run(database_url: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        for sql, args in statements:
            await conn.execute(sql, *args)
    finally:
        await conn.close()


async def window_names(database_url: str) -> list[str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT partition_name FROM awooop_dedupe_partitions ORDER BY 1")
        return [r[0] for r in rows]
    finally:
        await conn.close()


def name_weeks_back(names: list[str], current: str, weeks: int) -> str:
    return names[names.index(current) - weeks]


async def current_window(database_url: str) -> str:
    conn = await asyncpg.connect(database_url)
    try:
        name: str = await conn.fetchval(
            "SELECT partition_name FROM awooop_dedupe_partitions "
            "WHERE range_from = awooop_dedupe_window(now())"
        )
        return name
    finally:
        await conn.close()


async def expiry_body(services: Services) -> LoopContext:
    (spec,) = [s for s in all_loops(services) if s.name == expiry.LOOP_NAME]
    assert spec.category is LoopCategory.PLATFORM
    assert spec.resolved_project_id() == "__platform__"
    ctx = LoopContext(project_id=spec.resolved_project_id())
    await spec.body(ctx)
    return ctx


async def test_the_loop_keeps_windows_ahead_and_drops_only_expired_ones(
    services: Services, database_url: str
) -> None:
    await admin_run(
        database_url,
        (OLD_WINDOWS, ()),
        (FILL, (6, False, "dead", 3000)),  # six weeks back, every row expired: dropped
        (FILL, (5, False, "mixed", 200)),  # five weeks back: expired rows...
        (FILL, (5, True, "live", 1)),  # ...and one live (written under a longer TTL)
        (FILL, (1, False, "young", 50)),  # last week's window: ended less than the TTL ago
    )
    names, now_name = await window_names(database_url), await current_window(database_url)
    six, five, last = (name_weeks_back(names, now_name, w) for w in (6, 5, 1))
    before = REGISTRY.get_sample_value("awooop_dedupe_expired_total") or 0.0

    await expiry_body(services)

    after_names = await window_names(database_url)
    assert six not in after_names  # dropped: 3,000 expired rows gone with their table
    assert five in after_names and last in after_names and now_name in after_names
    assert all(n not in after_names for n in names[: names.index(six)])  # empty and old
    assert (REGISTRY.get_sample_value("awooop_dedupe_expired_total") or 0.0) - before == 3000
    ahead = REGISTRY.get_sample_value("awooop_dedupe_windows_ahead_seconds")
    assert ahead is not None and ahead >= windows.AHEAD.total_seconds()
    # Nothing detached is left behind, and the live row is still found by the window it is in.
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM pg_class WHERE relname = $1", six) == 0
        assert await conn.fetchval("SELECT count(*) FROM pg_inherits WHERE inhdetachpending") == 0
    finally:
        await conn.close()


async def test_a_detach_a_crash_interrupted_is_finished_next_time(
    services: Services, database_url: str
) -> None:
    await admin_run(database_url, (OLD_WINDOWS, ()), (FILL, (8, False, "gone", 10)))
    names, now_name = await window_names(database_url), await current_window(database_url)
    eight = name_weeks_back(names, now_name, 8)
    # The crash came after DETACH, before DROP: the table stands alone.
    await admin_run(database_url, (partition_ddl.DEDUPE.detach(eight), ()))
    assert eight not in await window_names(database_url)

    await expiry_body(services)

    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM pg_class WHERE relname = $1", eight) == 0
    finally:
        await conn.close()


async def test_after_the_ttl_the_same_key_creates_a_new_run_without_the_loop(
    services: Services,
) -> None:
    db = services.db
    event = ChannelEvent("api", "order-7", {"order": 7})
    first = await producer.submit(
        db, PROJECT, event, settings=_with(services.settings, dedupe_ttl_s=0.5)
    )
    assert not (await producer.submit(db, PROJECT, event)).created
    await asyncio.sleep(0.6)  # the 0.5 s dedupe TTL runs out
    again = await producer.submit(db, PROJECT, event)
    assert again.created and again.run_id != first.run_id


def test_candidates_are_windows_past_the_longest_ttl_and_the_previous_window() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    parts = [windows.window_of(f"awooop_channel_event_dedupe_p202611{d:02d}") for d in (2, 9, 16)]
    parts += [windows.window_of("awooop_channel_event_dedupe_p20261123")]
    week = timedelta(days=7)
    # The 16 Nov window ended on 23 Nov, 8.5 days before now.
    assert [p.name[-8:] for p in windows.candidates(parts, now, week)] == [
        "20261102",
        "20261109",
        "20261116",
    ]
    assert [p.name[-8:] for p in windows.candidates(parts, now, 3 * week)] == ["20261102"]
    assert windows.candidates(parts, now, 4 * week) == []
    # 23 Nov ends on 30 Nov: the previous window; never a candidate even with no TTL.
    assert "20261123" not in [p.name[-8:] for p in windows.candidates(parts, now, timedelta(0))]


async def test_a_channel_ttl_longer_than_the_setting_holds_windows_back(
    services: Services, database_url: str
) -> None:
    await credentials.set_dedupe_ttl(services.db, PROJECT, "api", 60 * 24 * 3600)
    await admin_run(database_url, (OLD_WINDOWS, ()), (FILL, (6, False, "dead", 10)))
    names, now_name = await window_names(database_url), await current_window(database_url)
    six = name_weeks_back(names, now_name, 6)
    await expiry_body(services)
    assert six in await window_names(database_url)  # within a 60-day TTL of now
