"""Which new waits ring the ``timers`` loop (migration 0155): only one due before every open
wait. The loop still fires a wait that did not ring at its due time: it reads the next due
time in every iteration, so it is never left to the poll fallback."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import msgspec

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.loops import LoopContext
from awooop.loops import timers as timers_loop
from awooop.loops.timers import CHANNEL
from awooop.services import Services
from tests.support.sleepers import sleepers
from tests.support.waiting import eventually

P = "proj-timer-rings"
Q = "proj-timer-rings-other"


async def open_waits(db: Database) -> int:
    async with db.platform() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM awooop_run_waits"))


async def test_a_new_wait_rings_only_when_due_before_every_open_wait(
    db: Database, settings: Settings
) -> None:
    listener = await asyncpg.connect(settings.database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(CHANNEL, lambda *a: heard.put_nowait(str(a[3])))
    try:
        now = datetime.now(UTC)
        await sleepers(db, P, 3, now + timedelta(seconds=100))  # the first waits: a ring
        await sleepers(db, P, 2, now + timedelta(seconds=200))  # later: none
        await sleepers(db, P, 1, now + timedelta(seconds=100))  # as due as an open one: none
        await sleepers(db, Q, 1, now + timedelta(seconds=150))  # another project's, later: none
        await sleepers(db, Q, 1, now + timedelta(seconds=50))  # sooner than all: a ring
        rings = [float(await asyncio.wait_for(heard.get(), 30)) for _ in range(2)]
        # Notifications arrive in commit order: a ring of the three silent writes would have
        # come before the last one.
        assert 90 < rings[0] <= 100 and 40 < rings[1] <= 50, rings
        async with db.platform_writes() as conn:  # the earliest fired: the next rings again
            await conn.execute(
                "DELETE FROM awooop_run_waits WHERE due_at <= $1", now + timedelta(seconds=100)
            )
        await sleepers(db, P, 1, now + timedelta(seconds=120))  # before the 150 s one
        ring = float(await asyncio.wait_for(heard.get(), 30))
        assert 110 < ring <= 120, ring
        assert heard.empty()
    finally:
        await listener.close()


async def test_the_loop_fires_a_wait_that_did_not_ring_at_its_due_time(
    settings: Settings,
) -> None:
    poll = 600.0  # the fallback never comes within the test
    services = await Services.open(
        msgspec.structs.replace(settings, timer_poll_interval_s=poll, timer_coalesce_s=0.05)
    )
    [spec] = timers_loop.loops(services)
    ctx = LoopContext(project_id="__platform__")
    listener = await asyncpg.connect(settings.database_url)
    heard: list[str] = []
    await listener.add_listener(CHANNEL, lambda *a: heard.append(str(a[3])))
    try:
        await spec.body(ctx)  # listening, nothing open: the next wake is the poll's
        now = datetime.now(UTC)
        await sleepers(services.db, P, 1, now + timedelta(seconds=1.0))  # rings
        await sleepers(services.db, P, 1, now + timedelta(seconds=2.0))  # silent
        deadline = time.monotonic() + 60.0  # a tenth of the poll interval
        while await open_waits(services.db):
            assert time.monotonic() < deadline, "the loop waited for its poll"
            await eventually(ctx.wakeup.is_set, what="the loop's wake", timeout_s=60.0)
            ctx.wakeup.clear()
            await spec.body(ctx)
        assert len(heard) == 1, heard  # the second wait rang nothing
    finally:
        await listener.close()
        if spec.close is not None:
            await spec.close()
        await services.close()
