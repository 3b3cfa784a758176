"""Routing runs to workers on real Postgres and Redis (awooop.runs.routing): a worker that
serves contract c1 never claims a run of c2, on any path (a stream delivery, polling, an
expired lease taken by polling or by reclaim, a suspect); the delivery it cannot take rings the
worker that serves the run; blocked_on names a contract no live worker serves."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunClaimed
from awooop.core.processes import register
from awooop.runs import leases
from awooop.runs.blocked import Reason
from awooop.runs.blocked_facts import blocked_on
from awooop.runs.leases import suspects
from awooop.runs.routing import ROUTE_CHANNEL, Routes, notice, routes_of
from awooop.services import Services
from awooop.streams.keys import Keys
from awooop.worker.runtime import Worker
from tests.integration.test_worker_streams import announce, ghost_reads, pending
from tests.support import handlers
from tests.support.runs import all_finished, create_runs, events_of, load
from tests.support.waiting import eventually
from tests.support.workers import serving_worker, streaming_worker

P = "proj-s"  # the project of test_worker_streams' helpers
C1 = routes_of(["c1"], None)
C2 = routes_of(["c2"], None)
SHORT = 0.05

pytestmark = pytest.mark.fast("streams")  # polling every 60 s: only a ring makes it look sooner


def keys_of(settings: Settings) -> Keys:
    return Keys(settings.redis_key_prefix, settings.shard_count)


def polling_worker(
    db: Database, settings: Settings, routes: Routes, *, streams: bool = False
) -> Worker:
    """A worker that takes work by polling (``streams``: as a stream worker does, every
    poll interval, 60 s here, or when rung)."""
    return Worker(
        db=db,
        settings=settings,
        handler=handlers.journaled,
        concurrency=4,
        routes=routes,
        streams=streams,
    )


async def claimers(db: Database, run_id: uuid.UUID) -> list[str]:
    return [e.worker_id for e in await events_of(db, P, run_id) if isinstance(e, RunClaimed)]


@pytest.mark.connections(10)
async def test_a_delivery_of_another_contracts_run_is_acknowledged_and_rings_its_worker(
    db: Database, fast: Settings, redis: Any
) -> None:
    """The c1 worker reads both messages; it runs the c1 run, and for the c2 run acknowledges
    its message and rings the c2 worker (which reads no stream here and polls every 60 s):
    the c2 run is taken at once, by the c2 worker only."""
    keys = keys_of(fast)
    [one] = await create_runs(db, P, payload={}, contract="c1")
    [two] = await create_runs(db, P, payload={}, contract="c2")
    listener = await asyncpg.connect(fast.database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(ROUTE_CHANNEL, lambda *a: heard.put_nowait(str(a[3])))
    c2 = polling_worker(db, fast, C2, streams=True)
    c2_stop = asyncio.Event()
    c2_task = asyncio.create_task(c2.run(c2_stop))
    worker, intake = streaming_worker(db, fast, redis, concurrency=4, routes=C1)
    try:
        await eventually(lambda: _connected(c2), timeout_s=30, what="the c2 worker listens")
        async with serving_worker(worker, intake):
            for run_id in (one, two):
                await announce(db, redis, keys, run_id)
            await eventually(
                lambda: all_finished(db, [one, two]), timeout_s=20, what="both runs finished"
            )
            assert await asyncio.wait_for(heard.get(), 5) == notice(P, "c2", two)
            await eventually(lambda: _no_pending(redis, keys), timeout_s=20, what="all acked")
    finally:
        c2_stop.set()
        await asyncio.wait_for(c2_task, 30)
        await listener.close()
    assert await claimers(db, one) == [worker.worker_id]
    assert await claimers(db, two) == [c2.worker_id]
    ran = {(e["run_id"], e["worker_id"]) for e in handlers.EFFECTS if e["what"] == "done"}
    assert (str(one), worker.worker_id) in ran and (str(two), c2.worker_id) in ran
    assert not {(str(two), worker.worker_id), (str(one), c2.worker_id)} & ran


async def _connected(worker: Worker) -> bool:
    return worker.cancel_listener.connected.is_set()


async def _no_pending(redis: Any, keys: Keys) -> bool:
    return not await pending(redis, keys)


@pytest.mark.connections(11)
async def test_polling_takes_only_the_runs_a_worker_serves(db: Database, fast: Settings) -> None:
    """Both polling passes (the fair order, then arrival order), and --project."""
    ones = await create_runs(db, P, 3, payload={}, contract="c1")
    twos = await create_runs(db, P, 3, payload={}, contract="c2")
    [bare] = await create_runs(db, P, 1, payload={})  # no contract
    [elsewhere] = await create_runs(db, "proj-other", 1, payload={}, contract="c1")
    c1_here = polling_worker(db, fast, routes_of(["c1"], [P]))
    assert await c1_here.run_until_idle(max_s=20) == 3
    assert await all_finished(db, ones)
    for run_id in [*twos, bare]:
        state = await load(db, P, run_id)
        assert (state.status, state.attempt_count) == ("PENDING", 0)
    assert (await load(db, "proj-other", elsewhere)).status == "PENDING"
    assert await polling_worker(db, fast, C2).run_until_idle(max_s=20) == 3
    assert await all_finished(db, twos)
    everything = polling_worker(db, fast, Routes())
    assert await everything.run_until_idle(max_s=20) == 2  # the bare run, the other project's
    assert await all_finished(db, [bare]) and (await load(db, "proj-other", elsewhere)).finished_at


async def test_an_expired_lease_is_taken_only_by_a_worker_that_serves_its_run(
    db: Database, fast: Settings, redis: Any
) -> None:
    """Polling, the direct take and reclaim of the dead consumer's message all leave the c2
    run to a c2 worker; the c1 reclaimer acknowledges the message and rings."""
    keys = keys_of(fast)
    [two] = await create_runs(db, P, payload={}, contract="c2")
    stream, _entry = await announce(db, redis, keys, two)
    await ghost_reads(redis, stream)
    assert await db.in_tenant(P, lambda c: leases.claim(c, two, "ghost", SHORT)) is not None
    await asyncio.sleep(fast.lease_ttl_s + 0.1)  # the lease expired, the entry idles past it
    c1 = polling_worker(db, fast, C1)
    assert await c1.poll_once(0.0) == 0
    taken = await db.in_platform_writes(
        lambda c: leases.take_expired(c, two, "w-c1", 5.0, None, C1.params)
    )
    assert taken is None
    _worker, intake = streaming_worker(db, fast, redis, concurrency=4, routes=C1)
    assert await intake.reclaim_once() == 1
    await eventually(lambda: _no_pending(redis, keys), timeout_s=20, what="the entry acked")
    state = await load(db, P, two)
    assert (state.status, state.worker_id, state.attempt_count) == ("RUNNING", "ghost", 1)
    c2 = polling_worker(db, fast, C2)
    assert await c2.run_until_idle(max_s=20) == 1
    done = await load(db, P, two)
    assert (done.status, done.attempt_count) == ("COMPLETED", 2)
    assert await claimers(db, two) == ["ghost", c2.worker_id]


async def test_suspects_of_another_contract_are_left_to_its_workers(db: Database) -> None:
    twos = await create_runs(db, P, 2, payload={}, contract="c2")
    for run_id in twos:
        assert await db.in_tenant(P, lambda c, r=run_id: leases.claim(c, r, "dead", SHORT))
    await asyncio.sleep(SHORT * 2)
    reaped = await db.in_platform_writes(lambda c: leases.reap(c, 10))
    assert [event.suspect for _state, event in reaped] == [True, True]
    assert not await db.in_platform(lambda c: suspects.suspects_waiting(c, C1.params))
    got = await db.in_platform_writes(
        lambda c: suspects.claim_suspect(c, "w-c1", 5.0, None, C1.params)
    )
    assert got is None
    assert await db.in_platform(lambda c: suspects.suspects_waiting(c, C2.params))
    alone = await db.in_platform_writes(
        lambda c: suspects.claim_suspect(c, "w-c2", 5.0, None, C2.params)
    )
    assert alone is not None and alone.run_id in twos and alone.worker_id == "w-c2"


async def test_blocked_on_names_a_contract_no_live_worker_serves(services: Services) -> None:
    db = services.db
    [one] = await create_runs(db, P, contract="c1")
    [two] = await create_runs(db, P, contract="c2")
    [bare] = await create_runs(db, P)

    async def reasons() -> dict[uuid.UUID, Reason | None]:
        found = await db.in_tenant(
            P, lambda c: blocked_on(c, services.redis, services.keys, [one, two, bare], 30.0)
        )
        return {run_id: (b.reason if b is not None else None) for run_id, b in found.items()}

    nobody = await reasons()  # no worker process at all: that is what blocks them
    assert set(nobody.values()) == {Reason.PENDING_NO_WORKER}
    async with db.platform_writes() as conn:
        await register(conn, "w-c1", "worker", "test", 30.0, (["c1"], None, None))
    got = await reasons()
    assert got[one] is Reason.PENDING_WORKERS_BUSY
    assert got[two] is Reason.NO_WORKER_FOR_CONTRACT and got[bare] is Reason.NO_WORKER_FOR_CONTRACT
    detail = (
        await db.in_tenant(P, lambda c: blocked_on(c, services.redis, services.keys, [two], 30.0))
    )[two]
    assert detail is not None and "no live worker serves contract c2 of proj-s" in detail.summary
    async with db.platform_writes() as conn:  # a worker of every contract, but another project
        await register(conn, "w-other", "worker", "test", 30.0, (None, ["proj-other"], None))
    assert (await reasons())[two] is Reason.NO_WORKER_FOR_CONTRACT
    async with db.platform_writes() as conn:
        await register(conn, "w-all", "up", "test", 30.0)
    assert set((await reasons()).values()) == {Reason.PENDING_WORKERS_BUSY}
    async with db.platform_writes() as conn:  # a stale row is no live worker
        await conn.execute("UPDATE awooop_processes SET seen_at = now() - interval '1 hour'")
        await register(conn, "w-c1", "worker", "test", 30.0, (["c1"], None, None))
    assert (await reasons())[two] is Reason.NO_WORKER_FOR_CONTRACT
