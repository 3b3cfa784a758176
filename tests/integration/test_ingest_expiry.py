"""Dedupe expiry (R-04): the platform loop deletes expired rows in batches at a flat cost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import msgspec
from prometheus_client import REGISTRY

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.loops import dedupe_expiry as expiry
from awooop.loops.framework import LoopCategory, LoopContext
from awooop.loops.registry import all_loops
from awooop.producer import ChannelEvent
from awooop.services import Services

PROJECT = "p1"

FILL = """
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, run_id, created_at, expires_at)
SELECT 'p' || (g % 7), 'api', $3 || g, gen_random_uuid(), now() - interval '8 days',
       CASE WHEN g % 2 = 0 THEN now() - random() * interval '1 day'    -- expired
            ELSE now() + random() * interval '7 days' END              -- live
FROM generate_series($1::bigint, $2::bigint) AS g
"""


def _with(settings: Settings, **changes: Any) -> Settings:
    return msgspec.structs.replace(settings, **changes)


async def fill(database_url: str, first: int, last: int, tag: str = "k") -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(FILL, first, last, tag)
        await conn.execute("ANALYZE awooop_channel_event_dedupe")
    finally:
        await conn.close()


async def dedupe_rows(db: Database) -> tuple[int, int]:
    async with db.platform() as conn:
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE expires_at <= now()) AS expired, "
            "count(*) FILTER (WHERE expires_at > now()) AS live "
            "FROM awooop_channel_event_dedupe"
        )
    assert row is not None
    return row["expired"], row["live"]


async def test_the_loop_deletes_expired_rows_in_batches_and_keeps_live_ones(
    services: Services, database_url: str
) -> None:
    await fill(database_url, 1, 2500)  # 1250 expired, 1250 live
    (spec,) = [s for s in all_loops(services) if s.name == expiry.LOOP_NAME]
    assert spec.category is LoopCategory.PLATFORM
    assert spec.resolved_project_id() == "__platform__"
    before = REGISTRY.get_sample_value("awooop_dedupe_expired_total") or 0.0

    deleted, more = await expiry.expire(services.db, batch=100, max_batches=5)
    assert (deleted, more) == (500, True)
    assert await dedupe_rows(services.db) == (750, 1250)

    ctx = LoopContext(project_id=spec.resolved_project_id())
    settings = services.settings
    assert settings.dedupe_expiry_batch >= 750
    await spec.body(ctx)
    assert await dedupe_rows(services.db) == (0, 1250)
    assert not ctx.wakeup.is_set()  # nothing left: no early next iteration
    after = REGISTRY.get_sample_value("awooop_dedupe_expired_total") or 0.0
    assert after - before == 750


async def test_a_loop_with_more_left_wakes_itself(settings: Settings, database_url: str) -> None:
    services = await Services.open(_with(settings, dedupe_expiry_batch=10), db_pool_size=2)
    try:
        await fill(database_url, 1, 1000)  # 500 expired; 20 batches of 10 delete 200
        (spec,) = [s for s in all_loops(services) if s.name == expiry.LOOP_NAME]
        ctx = LoopContext(project_id=spec.resolved_project_id())
        await spec.body(ctx)
        assert ctx.wakeup.is_set()
        assert (await dedupe_rows(services.db))[0] == 500 - 10 * expiry.MAX_BATCHES
    finally:
        await services.close()


async def test_after_expiry_the_same_key_creates_a_new_run(services: Services) -> None:
    db = services.db
    event = ChannelEvent("api", "order-7", {"order": 7})
    first = await producer.submit(
        db, PROJECT, event, settings=_with(services.settings, dedupe_ttl_s=0.5)
    )
    assert not (await producer.submit(db, PROJECT, event)).created
    await asyncio.sleep(0.6)  # the 0.5 s dedupe TTL runs out
    assert await expiry.expire(db, batch=100) == (1, False)
    again = await producer.submit(db, PROJECT, event)
    assert again.created and again.run_id != first.run_id


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


async def explain_batch(database_url: str, batch: int) -> dict[str, Any]:
    """EXPLAIN ANALYZE of one expiry batch, rolled back so the table stays as it is."""
    conn = await asyncpg.connect(database_url)
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            raw = await conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                + expiry.DELETE_EXPIRED_BATCH.replace("$1", str(int(batch)))
            )
        finally:
            await tx.rollback()
    finally:
        await conn.close()
    result: dict[str, Any] = json.loads(raw)[0]
    return result


def pages_touched(explained: dict[str, Any]) -> int:
    plan = explained["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


async def test_a_batch_costs_the_same_at_10k_and_100k_rows(database_url: str) -> None:
    """Not a timing: the plan walks the expiry index and touches a bounded number of pages."""
    batch = 1000
    await fill(database_url, 1, 10_000)
    small = await explain_batch(database_url, batch)
    await fill(database_url, 10_001, 100_000)
    large = await explain_batch(database_url, batch)

    for explained in (small, large):
        nodes = plan_nodes(explained["Plan"])
        index_scans = [n for n in nodes if n["Node Type"] == "Index Scan"]
        assert [n["Index Name"] for n in index_scans] == ["awooop_channel_event_dedupe_expiry_idx"]
        assert any(n["Node Type"] == "Limit" for n in nodes)
        assert not any(n["Node Type"] == "Seq Scan" for n in nodes)
        assert explained["Plan"]["Actual Rows"] == 0  # DELETE returns nothing
        (scan,) = index_scans
        assert scan["Actual Rows"] == batch
    # 10x the rows, about the same pages (heap pages of the batch plus a few index pages).
    assert pages_touched(large) <= 1.3 * pages_touched(small) + 20, (
        pages_touched(small),
        pages_touched(large),
    )
