"""A worker under network faults (R-18), with a fault proxy between it and its servers.

The rule under test: a worker that cannot renew stops its handlers before anyone else may take
the runs, whatever the network does; Redis trouble alone never costs a lease; a process never
runs two attempts of one run at once; latency alone loses no lease.

W1 talks to Postgres (or Redis) through :mod:`tests.support.faultproxy`; W2 talks to the
servers directly. Both run in this process, so their side effects share one clock.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunClaimed
from awooop.core.loops import run_loop
from awooop.loops.relay import relay_spec
from awooop.services import redis_client
from awooop.streams.keys import Keys
from awooop.streams.relay import Relay
from awooop.worker.assembly import build_worker
from awooop.worker.runtime import Worker
from awooop.worker.streaming import StreamIntake
from tests.support import handlers
from tests.support.faultproxy import fault_proxy
from tests.support.runs import create_runs, event_types, events_of, load
from tests.support.waiting import eventually

P = "proj-faults"


@pytest.fixture(autouse=True)
def clean_effects() -> Iterator[None]:
    handlers.EFFECTS.clear()
    yield
    handlers.EFFECTS.clear()


@pytest.fixture
def short(settings: Settings) -> Settings:
    """A 2 s lease renewed every 0.5 s; polling finds expired runs."""
    return msgspec.structs.replace(
        settings,
        lease_ttl_s=2.0,
        heartbeat_interval_s=0.5,
        poll_interval_s=0.2,
        reclaim_interval_s=0.5,
        shutdown_grace_s=0.5,
    )


def ticks(run_id: uuid.UUID, worker_id: str) -> list[float]:
    return [
        e["t"]
        for e in handlers.EFFECTS
        if e["run_id"] == str(run_id) and e["worker_id"] == worker_id and e["what"] == "tick"
    ]


@asynccontextmanager
async def serving(worker: Worker, extra: list[Any] | None = None) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop, extra=extra))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def claimed_at(db: Database, run_id: uuid.UUID, attempt: int) -> datetime:
    for event in await events_of(db, P, run_id):
        if isinstance(event, RunClaimed) and event.attempt == attempt:
            return event.at
    raise AssertionError(f"no RunClaimed for attempt {attempt}")


async def claims_of(db: Database, run_id: uuid.UUID) -> list[tuple[int, str, float]]:
    """Each claim of the run: (attempt, worker, time), for a failure's message."""
    return [
        (e.attempt, e.worker_id, round(e.at.timestamp(), 3))
        for e in await events_of(db, P, run_id)
        if isinstance(e, RunClaimed)
    ]


def story(run_id: uuid.UUID) -> list[tuple[str, int, str, float]]:
    """What the handlers did for the run, ticks left out but each attempt's first and last
    (worker, attempt, what, time), for a failure's message."""
    seen: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for e in handlers.effects_of(run_id):
        seen.setdefault((e["worker_id"], e["attempt"]), []).append(e)
    lines = []
    for (worker, attempt), effects in seen.items():
        ticked = [e for e in effects if e["what"] == "tick"]
        shown = [e for e in effects if e["what"] != "tick"] + ticked[:1] + ticked[-1:]
        lines += [(worker, attempt, e["what"], round(e["t"], 3)) for e in shown]
    return sorted(lines, key=lambda line: line[3])


async def one_black_hole_round(db: Database, short: Settings) -> None:
    handlers.EFFECTS.clear()
    [run_id] = await create_runs(db, P, payload={"tick_s": 6.0})
    with fault_proxy(short.database_url) as proxy:
        cut_off = msgspec.structs.replace(short, database_url=proxy.url(short.database_url))
        db1 = await Database.open(cut_off.database_url, max_size=4)
        w1 = Worker(db=db1, settings=cut_off, handler=handlers.ticking, worker_id="w1")
        w2 = Worker(db=db, settings=short, handler=handlers.ticking, worker_id="w2")
        try:
            async with serving(w1):
                await eventually(
                    lambda: len(ticks(run_id, "w1")) >= 10, timeout_s=60, what="10 ticks of w1"
                )
                proxy.blackhole()
                async with serving(w2):
                    await eventually(
                        lambda: len(ticks(run_id, "w2")) >= 1,
                        timeout_s=60,
                        what="a tick of w2 after it took the run",
                    )
                    taken_at = (await claimed_at(db, run_id, 2)).timestamp()
                    last_w1 = max(ticks(run_id, "w1"))
                    assert last_w1 < taken_at, (
                        f"W1 ticked {last_w1 - taken_at:.3f} s after W2's claim;"
                        f" claims {await claims_of(db, run_id)};"
                        f" effects {story(run_id)}"
                    )
                    proxy.heal()
                    await eventually(
                        lambda: _finished(run_id), timeout_s=30, what="the handler ended"
                    )
        finally:
            proxy.heal()
            await db1.close()
    state = await load(db, P, run_id)
    assert (state.status, state.attempt_count) == ("COMPLETED", 2)
    assert (await event_types(db, P, run_id)).count("RunCompleted") == 1


def _finished(run_id: uuid.UUID) -> bool:
    return any(e["run_id"] == str(run_id) and e["what"] == "end" for e in handlers.EFFECTS)


@pytest.mark.long(25)
@pytest.mark.connections(11)
async def test_a_worker_cut_off_from_postgres_stops_before_another_takes_its_run(
    db: Database, short: Settings
) -> None:
    for _ in range(3):
        await one_black_hole_round(db, short)


@pytest.mark.slow
async def test_a_worker_cut_off_from_postgres_stops_in_time_20_times(
    db: Database, short: Settings
) -> None:
    for _ in range(20):
        await one_black_hole_round(db, short)


def intake_of(intake: StreamIntake) -> list[Any]:
    return [intake.run, functools.partial(run_loop, intake.reclaim_spec())]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.connections(10)
async def test_redis_black_holed_costs_no_lease(db: Database, short: Settings) -> None:
    keys = Keys(short.redis_key_prefix, short.shard_count)
    redis = redis_client(short.redis_url)
    losses = sample("awooop_lease_losses_total")
    with fault_proxy(short.redis_url) as proxy:
        cut_off = msgspec.structs.replace(
            short, redis_url=proxy.url(short.redis_url), redis_socket_timeout_s=1.5
        )
        w1_redis = redis_client(cut_off.redis_url, cut_off.redis_socket_timeout_s)
        p1 = build_worker(
            db=db,
            settings=cut_off,
            handler=handlers.ticking,
            worker_id="w1",
            redis=w1_redis,
            keys=keys,
        )
        p2 = build_worker(
            db=db, settings=short, handler=handlers.ticking, worker_id="w2", redis=redis, keys=keys
        )
        w1, w2 = p1.worker, p2.worker
        relay = Relay(settings=short, redis=redis, keys=keys)
        relay_stop = asyncio.Event()
        relay_task = asyncio.create_task(run_loop(relay_spec(relay, short), relay_stop))
        try:
            async with serving(w1, p1.extra):
                [run_id] = await create_runs(db, P, payload={"tick_s": 5.0})
                await eventually(
                    lambda: len(ticks(run_id, "w1")) >= 5, timeout_s=60, what="5 ticks of w1"
                )
                proxy.blackhole()
                async with serving(w2, p2.extra):
                    await eventually(
                        lambda: _finished(run_id), timeout_s=30, what="the handler ended"
                    )
                    await asyncio.sleep(short.lease_ttl_s)  # room for a wrong second attempt
                proxy.heal()
        finally:
            proxy.heal()
            relay_stop.set()
            await asyncio.wait_for(relay_task, 30)
            await relay.close()
            await w1_redis.aclose()
            await redis.aclose()
    state = await load(db, P, run_id)
    assert (state.status, state.attempt_count) == ("COMPLETED", 1)
    assert {e["worker_id"] for e in handlers.EFFECTS if e["run_id"] == str(run_id)} == {"w1"}
    assert sample("awooop_lease_losses_total") == losses
    assert "RunRequeued" not in await event_types(db, P, run_id)


async def test_a_process_never_runs_two_attempts_of_one_run_at_once(
    db: Database, short: Settings
) -> None:
    """W1 loses its lease (no heartbeat reaches Postgres) while its handler ignores the
    cancellation for a while; W1's own polling takes the expired run again. The second
    attempt's handler starts only after the first one has ended."""
    [run_id] = await create_runs(db, P, payload={"tick_s": 4.0, "stubborn": 1.5})
    with fault_proxy(short.database_url) as proxy:
        cut_off = msgspec.structs.replace(short, database_url=proxy.url(short.database_url))
        db1 = await Database.open(cut_off.database_url, max_size=4)
        w1 = Worker(db=db1, settings=cut_off, handler=handlers.ticking, worker_id="w1")
        try:
            async with serving(w1):
                await eventually(
                    lambda: len(ticks(run_id, "w1")) >= 5, timeout_s=60, what="5 ticks of w1"
                )
                proxy.blackhole()
                await eventually(
                    lambda: _effect(run_id, "ignoring_cancel"),
                    timeout_s=60,
                    what="the handler ignoring its cancellation",
                )
                proxy.heal()  # W1's polling now finds its own expired run
                await eventually(lambda: _finished(run_id), timeout_s=30, what="the handler ended")
        finally:
            proxy.heal()
            await db1.close()
    spans: dict[int, list[float]] = {}
    for e in handlers.EFFECTS:
        if e["run_id"] == str(run_id):
            spans.setdefault(e["attempt"], []).append(e["t"])
    assert len(spans) >= 2, spans.keys()
    ordered = sorted(spans.items())
    for (_a, earlier), (_b, later) in itertools.pairwise(ordered):
        assert max(earlier) < min(later), "two attempts of one run overlapped in one process"
    assert (await load(db, P, run_id)).status == "COMPLETED"


def _effect(run_id: uuid.UUID, what: str) -> bool:
    return any(e["run_id"] == str(run_id) and e["what"] == what for e in handlers.EFFECTS)


@pytest.mark.slow
async def test_300_ms_on_every_postgres_round_trip_loses_no_lease_with_the_defaults(
    db: Database, settings: Settings
) -> None:
    """Default lease settings (30 s lease, 5 s heartbeat); the handlers run longer than a
    lease, so only renewals through the slow link keep them."""
    defaults = msgspec.structs.replace(
        Settings(), database_url=settings.database_url, redis_url=settings.redis_url
    )
    run_ids = await create_runs(db, P, 4, payload={"tick_s": 35.0, "tick_every_s": 0.5})
    losses = sample("awooop_lease_losses_total")
    with fault_proxy(defaults.database_url) as proxy:
        slow = msgspec.structs.replace(defaults, database_url=proxy.url(defaults.database_url))
        proxy.latency(0.3)
        db1 = await Database.open(slow.database_url, max_size=4)
        w1 = Worker(db=db1, settings=slow, handler=handlers.ticking, worker_id="w1")
        try:
            async with serving(w1):
                await eventually(
                    lambda: all(_finished(r) for r in run_ids),
                    timeout_s=120,
                    what="every handler ended",
                )
        finally:
            await db1.close()
    assert sample("awooop_lease_losses_total") == losses
    for run_id in run_ids:
        state = await load(db, P, run_id)
        assert (state.status, state.attempt_count) == ("COMPLETED", 1)
