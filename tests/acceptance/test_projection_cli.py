"""``awooop projector`` as a process, killed -9 mid-stream and restarted (R-32).

A relay process publishes while runs are written; the projector process is killed without any
cleanup while it applies batches, then a new one starts (another consumer name: it takes the
dead one's pending messages over after AWOOOP_PROJECTOR_RECLAIM_IDLE_S). In the end every
event is applied exactly once: the views equal the log rebuilt by replay (the per-project
counts would drift on any double or missed application) and nothing is left pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

import pytest
import redis.asyncio as aioredis

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.projections.registry import get
from awooop.projections.replay import replay
from awooop.streams.keys import projector_group
from tests.support.projection_workload import Workload
from tests.support.streams import keys_for
from tests.support.waiting import eventually

PROJECTION = "run_state_view"


def env_for(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_REDIS_URL": settings.redis_url,
        "AWOOOP_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "AWOOOP_RELAY_POLL_INTERVAL_S": "0.2",
        "AWOOOP_PROJECTOR_RECLAIM_IDLE_S": "1",
        "AWOOOP_PROJECTOR_RECONCILE_INTERVAL_S": "3600",  # the streams must do the work
        "AWOOOP_PROJECTOR_MAX_IN_FLIGHT": "4",  # small batches: the kill lands mid-stream
        "AWOOOP_SHUTDOWN_GRACE_S": "5",
        "AWOOOP_LOG_LEVEL": "warning",
        "OTEL_TRACES_EXPORTER": "none",
    }


async def start(settings: Settings, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awooop.cli",
        *args,
        env=env_for(settings),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 20)
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def view_rows(db: Database) -> int:
    async with db.platform() as conn:
        count: int = await conn.fetchval("SELECT count(*) FROM awooop_run_state_view")
    return count


@pytest.mark.connections(21)
async def test_a_projector_killed_mid_batch_and_restarted_applies_every_event_once(
    settings: Settings, db: Database
) -> None:
    keys = keys_for(settings)
    relay = await start(settings, "relay")
    first = await start(settings, "projector", PROJECTION)
    second = None
    redis: Any = aioredis.Redis.from_url(settings.redis_url)
    try:
        work = Workload(db, seed=41)
        producing = asyncio.create_task(work.run(walkers=3, runs_each=15, max_steps=8))

        async def projecting() -> bool:
            assert first.returncode is None, "projector exited"
            return await view_rows(db) >= 5

        await eventually(
            projecting, timeout_s=60, interval_s=0.01, what="the first projector writes 5 view rows"
        )
        first.kill()  # SIGKILL in the middle of the stream: no cleanup at all
        await first.wait()
        await producing
        second = await start(settings, "projector", PROJECTION)

        async def caught_up() -> bool:
            assert second is not None and second.returncode is None, "projector exited"
            return (await replay(settings.database_url, get(PROJECTION))).differences == 0

        await eventually(
            caught_up,
            timeout_s=90,
            interval_s=1.0,
            what="the view equal to the log once the second projector caught up",
        )

        async def nothing_pending() -> bool:
            pending = 0
            for shard in keys.shards():
                if not await redis.exists(keys.events_stream(shard)):
                    continue  # no project of this test maps to the shard
                for group in await redis.xinfo_groups(keys.events_stream(shard)):
                    if group["name"].decode() == projector_group(PROJECTION):
                        pending += group["pending"]
            return pending == 0

        await eventually(
            nothing_pending,
            timeout_s=30,
            interval_s=0.2,
            what="no entry pending in any projector group",
        )
    finally:
        for proc in (first, second, relay):
            if proc is not None:
                await stop(proc)
        await redis.aclose()
    async with db.platform() as conn:
        counts = await conn.fetch(
            "SELECT project_id, status, count(*)::int FROM awooop_run_state GROUP BY 1, 2 "
            "ORDER BY 1, 2"
        )
        view_counts = await conn.fetch("SELECT * FROM awooop_run_counts ORDER BY 1, 2")
    assert [tuple(r) for r in counts] == [tuple(r) for r in view_counts]
    assert sum(r[2] for r in counts) == len(work.run_ids)
