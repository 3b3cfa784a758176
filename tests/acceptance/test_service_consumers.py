"""A service's projection in processes (docs/consumers.md, R-61): ``awooop projector`` and
``awooop replay`` run and rebuild it once registered; a service's own consumer process killed
-9 with messages in hand leaves them to another consumer, which takes them over."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
import redis.asyncio as aioredis

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.streams.keys import projector_group
from tests.acceptance.test_projection_cli import env_for, start, stop
from tests.support import shop_projection
from tests.support.shop_projection import Shop, view
from tests.support.streams import keys_for
from tests.support.waiting import eventually

SOURCE = "awooop.examples.orders:OrderTotals"


async def pending_in_group(redis: Any, settings: Settings, group: str) -> int:
    keys = keys_for(settings)
    total = 0
    for shard in keys.shards():
        if not await redis.exists(keys.events_stream(shard)):
            continue
        for info in await redis.xinfo_groups(keys.events_stream(shard)):
            if info["name"].decode() == group:
                total += info["pending"]
    return total


async def until_line(stream: asyncio.StreamReader, wanted: bytes) -> None:
    """Read the process's output (its logs too) up to the line ``wanted``."""
    while (line := await stream.readline()) != wanted:
        assert line, f"the process ended before printing {wanted!r}"
        print(line.decode(), end="")


async def run_cli(settings: Settings, *args: str, **env: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awooop.cli",
        *args,
        env={**env_for(settings), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.mark.long(30)
@pytest.mark.connections(18)
async def test_awooop_projector_and_replay_run_a_registered_projection(
    settings: Settings, db: Database
) -> None:
    await shop_projection.create_table(settings.database_url)
    shop = Shop(db, seed=11)
    relay = await start(settings, "relay")
    projector = await start(settings, "projector", "--projection", SOURCE)
    try:
        await shop.run(50)

        async def built() -> bool:
            assert projector.returncode is None, "the projector exited"
            return await view(db) == shop.expected()

        await eventually(built, timeout_s=60, interval_s=0.2, what="the view of every order")
    finally:
        await stop(projector)
        await stop(relay)
    code, out = await run_cli(
        settings, "replay", "order_totals", "--swap", "--verify", AWOOOP_PROJECTIONS=SOURCE
    )
    assert code == 0, out
    assert await view(db) == shop.expected()

    # A registration the projector cannot run on stops it before anything runs, with the code.
    code, out = await run_cli(settings, "projector", "--projection", "tests.support.nowhere:X")
    assert code != 0
    assert "E-PROJECTION-003" in out


@pytest.mark.long(40)
@pytest.mark.connections(11)
async def test_a_killed_consumer_process_leaves_its_messages_to_another(
    settings: Settings, db: Database
) -> None:
    await shop_projection.create_table(settings.database_url)
    shop = Shop(db, seed=12)
    relay = await start(settings, "relay")
    doomed = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.shop_projection",
        env={**env_for(settings), "BLOCK_ON_ORDER": "blocking-order", "CONSUMER_NAME": "doomed"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    taker = None
    redis: Any = aioredis.Redis.from_url(settings.redis_url)
    group = projector_group("order_totals")
    try:
        assert doomed.stdout is not None
        assert await asyncio.wait_for(doomed.stdout.readline(), 60) == b"started\n"
        await shop.run(20, projects=("shop",))
        await eventually(
            lambda: view(db), equals=shop.expected(), timeout_s=60, what="the first orders"
        )
        await shop.place("shop", "ann", 7, order="blocking-order")
        await shop.run(20, projects=("shop",))
        await asyncio.wait_for(until_line(doomed.stdout, b"blocked\n"), 60)
        assert await pending_in_group(redis, settings, group) > 0
        doomed.kill()  # SIGKILL with the messages in hand: they stay pending under its name
        await doomed.wait()

        taker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.shop_projection",
            env={**env_for(settings), "CONSUMER_NAME": "taker"},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await eventually(
            lambda: view(db), equals=shop.expected(), timeout_s=60, what="every order once"
        )
        await eventually(
            lambda: pending_in_group(redis, settings, group),
            equals=0,
            timeout_s=60,
            what="the dead consumer's messages taken over and acknowledged",
        )
        consumers = {
            c["name"].decode(): c["pending"]
            for shard in keys_for(settings).shards()
            if await redis.exists(keys_for(settings).events_stream(shard))
            for c in await redis.xinfo_consumers(keys_for(settings).events_stream(shard), group)
        }
        assert consumers.get("doomed:order_totals") == 0
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await doomed.wait()
        if taker is not None:
            await stop(taker)
        await stop(relay)
        await redis.aclose()
    assert await view(db) == shop.expected()
