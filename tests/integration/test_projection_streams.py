"""Projectors on the real relay and consumer groups (R-31, R-32, R-33)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from awooop.commands import doctor_flow as doctor
from awooop.core.db import Database
from awooop.core.loop_heartbeats import DatabaseHeartbeats
from awooop.core.loops import run_loop
from awooop.loops.projector import consumer_for, consumer_loop
from awooop.projections.registry import get, projector_names
from awooop.projections.replay import replay
from awooop.projections.runner import Projector
from awooop.services import Services
from awooop.streams.relay import Relay
from tests.support.projection_workload import Workload
from tests.support.waiting import eventually


async def workload(db: Database, seed: int) -> None:
    work = Workload(db, seed=seed)
    await work.run(walkers=3, runs_each=5, max_steps=8)
    await work.revisions("alpha", f"contract-{seed}", 2)


async def assert_views_equal_the_log(database_url: str) -> None:
    for name in projector_names():
        report = await replay(database_url, get(name))
        assert report.differences == 0, report.lines()


@pytest.mark.connections(14)
async def test_projectors_fed_by_the_relay_build_views_equal_to_the_log(
    services: Services, db: Database, database_url: str
) -> None:
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    projectors = [Projector(db, get(name)) for name in projector_names()]
    consumers = [consumer_for(services, p, "c1") for p in projectors]
    try:
        for c in consumers:
            await c.ensure_groups()
        for seed in (1, 2):
            await workload(db, seed)
            assert await relay.drain() > 0
            for c in consumers:
                assert await c.run_until_idle() > 0
    finally:
        await relay.close()
    await assert_views_equal_the_log(database_url)
    # every entry was acknowledged: nothing left pending in any projector group
    for c in consumers:
        for stream in c.streams:
            for group in await services.redis.xinfo_groups(stream):
                if group["name"].decode() == c.group:
                    assert group["pending"] == 0


@pytest.mark.connections(15)
async def test_after_redis_loses_its_data_projectors_heal_from_postgres(
    services: Services, db: Database, database_url: str
) -> None:
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    projectors = [Projector(db, get(name)) for name in projector_names()]
    resets: list[int] = []
    for p in projectors:
        heal = p.on_reset

        async def counted(shard: int, heal: Any = heal) -> None:
            resets.append(shard)
            await heal(shard)

        p.on_reset = counted  # type: ignore[method-assign]  # observe the hook
    consumers = [consumer_for(services, p, "c1") for p in projectors]
    try:
        await workload(db, 3)
        await relay.drain()
        for c in consumers:
            await c.run_until_idle()
        # Redis loses everything of this test (its own key prefix on the shared server) ...
        doomed = [k async for k in services.redis.scan_iter(match=f"{services.keys.prefix}:*")]
        await services.redis.delete(*doomed)
        # ... while runs go on; the relay rebuilds the shards from Postgres.
        await workload(db, 4)
        await relay.drain()
        for c in consumers:
            await c.run_until_idle()
            await c.check_epochs()
    finally:
        await relay.close()
    assert resets, "no consumer saw the rebuilt shard"
    await assert_views_equal_the_log(database_url)


async def test_a_running_projector_loop_is_healthy_for_the_doctor_mid_window(
    services: Services, db: Database
) -> None:
    # One iteration of a projector's consumer loop lasts its window; the doctor must judge
    # the loop against that, not against the 0.01 s pause between windows.
    spec = consumer_loop(services, Projector(db, get("run_timeline")), window_s=0.6)
    assert spec.cycle_s == pytest.approx(0.61)
    stop = asyncio.Event()
    task = asyncio.ensure_future(run_loop(spec, stop, heartbeat=DatabaseHeartbeats(db)))

    async def beats() -> list[Any]:
        async with db.platform_writes() as conn:
            return await conn.fetch(
                "SELECT interval_s FROM awooop_loop_heartbeats WHERE loop_name = $1", spec.name
            )

    try:
        await eventually(beats, what="the first heartbeat, written at the first window's end")
        await asyncio.sleep(0.3)  # in the middle of the second window
        checks = await doctor.loops(services)
    finally:
        stop.set()
        await task
    assert [(c.name, c.status) for c in checks] == [("loops", doctor.OK)], checks
    assert [r["interval_s"] for r in await beats()] == [pytest.approx(0.61)]
