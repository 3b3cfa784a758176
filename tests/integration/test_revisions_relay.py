"""End to end with the real outbox relay: activation, relay, notice, every worker (R-22..R-26)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from awooop.core.config import Settings
from awooop.core.loops import run_loop
from awooop.llm.gateway import ModelGateway
from awooop.loops.relay import relay_spec
from awooop.revisions.service import Revisions
from awooop.services import Services
from awooop.streams.envelope import Notice
from awooop.streams.relay import Relay
from tests.integration.test_revisions_split_brain import (
    WORKERS,
    gateway_settings,
)
from tests.support.services import private_redis
from tests.support.waiting import eventually

P = "p1"
POLICY = ("policy_routing", "default")
TOPOLOGY = ("__platform__", "platform_resource", "ollama_topology")


@pytest.fixture
async def relay(services: Services) -> AsyncIterator[Relay]:
    """The relay running as its loop (NOTIFY wake-up at commit, poll fallback)."""
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(relay_spec(relay, services.settings), stop))
    yield relay
    stop.set()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await relay.close()


async def delivered(services: Services) -> None:
    """Wait until the relay has delivered every contract outbox row."""

    async def none_left() -> bool:
        async with services.db.platform() as conn:
            left = await conn.fetchval(
                "SELECT count(*) FROM awooop_contract_outbox WHERE delivered_at IS NULL"
            )
        return bool(left == 0)

    await eventually(none_left, interval_s=0.01, what="every contract outbox row delivered")


async def start(services: Services, n: int) -> list[ModelGateway]:
    workers = [ModelGateway(services) for _ in range(n)]
    for worker in workers:
        await worker.start()
    return workers


@pytest.mark.connections(17)
async def test_an_activation_clears_every_workers_entry_through_the_relay(
    services: Services, relay: Relay
) -> None:
    revisions = Revisions(services.db)
    r1 = await revisions.create(P, *POLICY, {"model": "a"})
    r2 = await revisions.create(P, *POLICY, {"model": "b"})
    await revisions.activate(P, *POLICY, r1.revision_id)
    await delivered(services)  # r1's notice went out before the workers started
    workers = await start(services, WORKERS)
    try:
        key = (P, *POLICY)
        for worker in workers:
            assert (await worker.complete(P, "warm")).revision_id == r1.revision_id
            assert key in worker.cache
        applied: dict[int, tuple[float, bool]] = {}
        for i, worker in enumerate(workers):

            def observe(item: Notice, at: float, i: int = i, w: ModelGateway = worker) -> None:
                if item.new_revision_id == r2.revision_id:
                    applied[i] = (at, key in w.cache)

            worker.reader.observer = observe
        await revisions.activate(P, *POLICY, r2.revision_id)
        committed = time.time()
        await eventually(lambda: len(applied) == WORKERS, what="every worker applied r2's notice")
        latency = max(at for at, _ in applied.values()) - committed
        print(f"commit -> relay -> all {WORKERS} workers: {latency * 1000:.1f} ms")
        assert not any(cached for _, cached in applied.values())  # gone when the notice lands
        assert all(key not in w.cache for w in workers)
        assert latency < 5.0  # functional bound (the relay polls every 1 s even without NOTIFY)
        async with services.db.platform() as conn:
            row = await conn.fetchrow(
                "SELECT delivered_at, relay_attempts FROM awooop_contract_outbox "
                "WHERE new_revision_id = $1",
                r2.revision_id,
            )
        assert row is not None and row["delivered_at"] is not None and row["relay_attempts"] == 1
    finally:
        for worker in workers:
            await worker.close()


@pytest.mark.connections(17)
async def test_a_topology_activation_rebuilds_every_workers_client_through_the_relay(
    services: Services, relay: Relay
) -> None:
    workers = await start(services, WORKERS)
    try:
        assert [w.client_instances for w in workers] == [1] * WORKERS
        revisions = Revisions(services.db)
        topology = await revisions.create(*TOPOLOGY, {"url": "local:?delay_ms=0"})
        await revisions.activate(*TOPOLOGY, topology.revision_id)
        await eventually(
            lambda: all(w.client_instances == 2 for w in workers),
            what="every worker rebuilt its client",
        )
        assert all(w._slot.client.url == "local:?delay_ms=0" for w in workers)
    finally:
        for worker in workers:
            await worker.close()


@pytest.mark.connections(9)
async def test_after_redis_loses_the_stream_workers_drop_their_caches_and_notices_resume(
    settings: Settings,
) -> None:
    with private_redis() as server:
        services = await Services.open(gateway_settings(settings, server.url), db_pool_size=4)
        relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
        stop = asyncio.Event()
        relay_task = asyncio.create_task(run_loop(relay_spec(relay, services.settings), stop))
        workers: list[ModelGateway] = []
        try:
            revisions = Revisions(services.db)
            r1 = await revisions.create(P, *POLICY, {"model": "a"})
            r2 = await revisions.create(P, *POLICY, {"model": "b"})
            await revisions.activate(P, *POLICY, r1.revision_id)
            await delivered(services)
            workers = await start(services, 3)
            key = (P, *POLICY)
            for worker in workers:
                await worker.complete(P, "warm")
            server.restart()  # no persistence: the stream and its epoch are gone
            await eventually(
                lambda: all(w.reader.resets >= 1 for w in workers),
                timeout_s=30,
                what="every reader reset after Redis lost the stream",
            )
            assert all(key not in w.cache for w in workers)
            # The relay writes a new epoch; once every reader has adopted it, notices flow again.
            epoch: list[bytes | None] = [None]

            async def adopted() -> bool:
                epoch[0] = await services.redis.get(services.keys.notices_epoch())
                return epoch[0] is not None and all(w.reader.epoch == epoch[0] for w in workers)

            await eventually(
                adopted, interval_s=0.01, what="every reader adopted the relay's new epoch"
            )
            for worker in workers:
                assert (await worker.complete(P, "warm")).revision_id == r1.revision_id
            seen_before = [w.reader.notices_seen for w in workers]
            await revisions.activate(P, *POLICY, r2.revision_id)
            await eventually(
                lambda: all(
                    w.reader.notices_seen > before
                    for w, before in zip(workers, seen_before, strict=True)
                ),
                what="every reader saw r2's notice",
            )
            assert all(key not in w.cache for w in workers)
        finally:
            for worker in workers:
                await worker.close()
            stop.set()
            relay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay_task
            await relay.close()
            await services.close()
