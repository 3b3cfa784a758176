"""The split-brain test (R-24, R-26): no call that starts after an activation
commits uses an older revision, on any worker, with notices, without Redis, without notices.

10 gateways (each its own cache, pointer connection and notice reader, like 10 workers) call
the model in a tight loop while one activator moves the policy through 100 revisions. Every
call records (start time, revision used); every activation records the time its commit was
acknowledged. A call that started after activation i's commit must have used revision >= i.
The activator runs in its own thread with its own event loop and database pool (like another
process), so its commits are not queued behind the workers' callbacks. Times are
``time.monotonic()`` in one process, so they are comparable; the recorded commit time is at or
after the real commit and the recorded start is before the call's pointer query, so the check
can only be stricter than the guarantee, never looser.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.loops import run_loop
from awooop.llm.gateway import ModelGateway
from awooop.loops.relay import relay_spec
from awooop.revisions.service import Revisions
from awooop.services import Services
from awooop.streams.relay import Relay
from tests.support.revisions import drop_outbox, set_epoch
from tests.support.services import private_redis
from tests.support.waiting import eventually

P, FAMILY, CONTRACT = "p1", "policy_routing", "default"
WORKERS = 10
ACTIVATIONS = 100


class Outcome(msgspec.Struct):
    calls: list[tuple[float, int]]
    commits: list[tuple[float, int]]
    violations: list[tuple[float, int, int]]
    distinct_seen: int
    notices_seen: int


async def prepare(db: Database) -> list[uuid.UUID]:
    revisions = Revisions(db)
    ids = [
        (await revisions.create(P, FAMILY, CONTRACT, {"model": f"m{seq}"})).revision_id
        for seq in range(ACTIVATIONS + 1)
    ]
    await revisions.activate(P, FAMILY, CONTRACT, ids[0], expected=None)
    return ids


async def split_brain(
    gateway_services: Services,
    database_url: str,
    ids: list[uuid.UUID],
    deliver: Callable[[Database], Awaitable[object]] | None,
    before_activations: Callable[[], None] | None = None,
    settle: Callable[[list[ModelGateway]], bool] | None = None,
) -> Outcome:
    seq_of = {rid: seq for seq, rid in enumerate(ids)}
    workers = [ModelGateway(gateway_services) for _ in range(WORKERS)]
    for worker in workers:
        await worker.start()
    calls: list[tuple[float, int]] = []
    done = asyncio.Event()

    async def work(worker: ModelGateway) -> None:
        while not done.is_set():
            started = time.monotonic()
            result = await worker.complete(P, "route me")
            assert result.revision_id is not None
            calls.append((started, seq_of[result.revision_id]))

    async def activate_all() -> list[tuple[float, int]]:
        commits: list[tuple[float, int]] = []
        db = await Database.open(database_url, max_size=2)
        revisions = Revisions(db)
        try:
            for seq in range(1, ACTIVATIONS + 1):
                await revisions.activate(P, FAMILY, CONTRACT, ids[seq], expected=ids[seq - 1])
                commits.append((time.monotonic(), seq))
                if deliver is not None:
                    await deliver(db)
                await asyncio.sleep(0.002)  # activations paced: calls land between them
        finally:
            await db.close()
        return commits

    async def drive() -> list[tuple[float, int]]:
        await eventually(
            lambda: all((P, FAMILY, CONTRACT) in w.cache for w in workers),
            interval_s=0.01,
            what="every worker's cache warm on revision 0",
        )
        if before_activations is not None:
            before_activations()
        try:
            commits = await asyncio.to_thread(asyncio.run, activate_all())
            await asyncio.sleep(0.05)  # calls after the last activation too
            if settle is not None:  # e.g. until every notice reached every worker
                await eventually(
                    lambda: settle(workers), interval_s=0.01, what="the workers settled"
                )
        finally:
            done.set()
        return commits

    try:
        commits, *_ = await asyncio.gather(drive(), *(work(w) for w in workers))
    finally:
        notices = sum(w.reader.notices_seen for w in workers)
        for worker in workers:
            await worker.close()
    commit_times = [t for t, _ in commits]
    violations = []
    for started, seq in calls:
        # The newest activation whose commit was acknowledged before this call started.
        required = bisect.bisect_left(commit_times, started)
        if seq < required:
            violations.append((started, seq, required))
    return Outcome(
        calls=calls,
        commits=commits,
        violations=violations,
        distinct_seen=len({seq for _, seq in calls}),
        notices_seen=notices,
    )


def check(outcome: Outcome) -> None:
    assert len(outcome.commits) == ACTIVATIONS
    assert outcome.violations == [], f"{len(outcome.violations)} calls used an older revision"
    # The test means something: calls ran all along and saw many of the revisions.
    assert len(outcome.calls) >= 5 * ACTIVATIONS
    last_commit = outcome.commits[-1][0]
    after = [seq for started, seq in outcome.calls if started > last_commit]
    assert after and set(after) == {ACTIVATIONS}
    assert outcome.distinct_seen >= ACTIVATIONS // 4


def gateway_settings(settings: Settings, redis_url: str | None = None) -> Settings:
    return msgspec.structs.replace(
        settings,
        pointer_check_connections=1,
        redis_url=redis_url or settings.redis_url,
        llm_url="local:?delay_ms=1",  # a 1 ms model call
    )


@pytest.mark.connections(20)
async def test_split_brain_with_notices(settings: Settings) -> None:
    """Notices delivered by the real outbox relay (running as its loop, woken at commit)."""
    services = await Services.open(gateway_settings(settings), db_pool_size=2)
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    stop = asyncio.Event()
    relay_task = asyncio.create_task(run_loop(relay_spec(relay, services.settings), stop))
    try:
        ids = await prepare(services.db)
        await eventually(
            lambda: services.redis.exists(services.keys.notices_epoch()),
            interval_s=0.01,
            what="the notices epoch, written by the relay when it takes the lead",
        )
        outcome = await split_brain(
            services,
            settings.database_url,
            ids,
            None,
            settle=lambda workers: all(w.reader.notices_seen >= ACTIVATIONS for w in workers),
        )
    finally:
        stop.set()
        relay_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay_task
        await relay.close()
        await services.close()
    check(outcome)
    # Every worker saw every notice (the calls kept running until they had).
    assert outcome.notices_seen >= WORKERS * ACTIVATIONS, outcome.notices_seen


@pytest.mark.connections(20)
async def test_split_brain_with_redis_stopped(settings: Settings, db: Database) -> None:
    ids = await prepare(db)
    with private_redis() as server:
        services = await Services.open(gateway_settings(settings, server.url), db_pool_size=2)
        try:
            await set_epoch(services.redis, services.keys)
            outcome = await split_brain(
                services, settings.database_url, ids, None, before_activations=server.stop
            )
        finally:
            await services.close()
    check(outcome)
    assert outcome.notices_seen == 0


@pytest.mark.connections(20)
async def test_split_brain_with_notices_dropped(settings: Settings, db: Database) -> None:
    ids = await prepare(db)
    services = await Services.open(gateway_settings(settings), db_pool_size=2)
    try:
        await set_epoch(services.redis, services.keys)
        # The relay "delivers" every row but the notices never reach the stream.
        outcome = await split_brain(services, settings.database_url, ids, drop_outbox)
    finally:
        await services.close()
    check(outcome)
    assert outcome.notices_seen == 0
