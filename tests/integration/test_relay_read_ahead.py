"""A transaction held open by one login does not hold back another project's dispatch: the relay
publishes what committed above the follower horizon ahead of its cursor
(awooop.streams.relay_ahead), in per-run order, once in the normal path, and loses nothing to a
relay crash or a Redis loss.

The workers' polling fallback is kept out (``fast("streams")``: 60 s), so a run that starts was
dispatched through the streams."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.events import run_stream_id
from awooop.core.loops import run_loop
from awooop.core.pools import connect
from awooop.loops.relay import relay_spec
from awooop.producer import ChannelEvent, set_tenant, submit
from awooop.streams.envelope import FIELD, Envelope, decode_envelope
from awooop.streams.keys import Keys
from awooop.streams.relay import Relay
from tests.support.runs import create_runs
from tests.support.streams import (
    check_published_in_order,
    keys_for,
    published_envelopes,
    running_relay,
)
from tests.support.waiting import eventually
from tests.support.workers import serving_worker, streaming_worker

HOLDER = "alpha"
P = "beta"

pytestmark = pytest.mark.fast("streams")


class Held:
    """A plain connection that BEGAN, wrote a run of ``alpha`` and keeps its transaction open."""

    def __init__(self, conn: Connection, tx: Any, run_id: uuid.UUID, xid: int) -> None:
        self.conn = conn
        self.tx = tx
        self.run_id = run_id
        self.xid = xid

    async def commit(self) -> None:
        await self.tx.commit()


@asynccontextmanager
async def held_open(settings: Settings, project: str = HOLDER) -> AsyncIterator[Held]:
    conn = await connect(settings.database_url)
    try:
        tx = conn.transaction()
        await tx.start()
        await set_tenant(conn, project)
        done = await submit(conn, project, ChannelEvent("api", uuid.uuid4().hex, {}))
        xid = int(await conn.fetchval("SELECT pg_current_xact_id()::text"))
        yield Held(conn, tx, done.run_id, xid)
    finally:
        await conn.close()


async def statuses(db: Database, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT run_id, status FROM awooop_run_state WHERE run_id = ANY($1)", run_ids
        )
    return {r["run_id"]: r["status"] for r in rows}


async def completed(db: Database, run_ids: list[uuid.UUID]) -> bool:
    found = await statuses(db, run_ids)
    return len(found) == len(run_ids) and set(found.values()) == {"COMPLETED"}


async def logged_event_ids(db: Database) -> set[uuid.UUID]:
    async with db.platform() as conn:
        return {r["event_id"] for r in await conn.fetch("SELECT event_id FROM awooop_events")}


async def work_entries(redis: Any, keys: Keys, project: str) -> list[Envelope]:
    stream = keys.work_stream(keys.shard_of(project))
    return [decode_envelope(fields[FIELD]) for _, fields in await redis.xrange(stream)]


@pytest.mark.connections(23)
async def test_runs_of_another_project_complete_while_a_transaction_is_held_open(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_for(fast)
    # The worker as a worker process runs it (its reclaim loop too), with a lease a loaded
    # machine does not trip: the streams timings' 1 s lease bounds each statement at 0.33 s, and
    # with polling kept out a claim or a renewal that ran past that would leave its run to the
    # 60 s poll. This test is about the relay's read-ahead, not about that recovery.
    steady = msgspec.structs.replace(fast, lease_ttl_s=6.0, heartbeat_interval_s=0.5)
    worker, intake = streaming_worker(db, steady, redis, concurrency=8)
    relay = Relay(settings=fast, redis=redis, keys=keys)
    async with (
        running_relay(relay, fast),
        serving_worker(worker, intake),
        held_open(fast) as held,
    ):
        run_ids = await create_runs(db, P, 10, payload={}, per_transaction=1)
        await eventually(
            lambda: completed(db, run_ids),
            timeout_s=60,
            what="beta's runs completed while alpha's transaction is open",
        )
        assert held.conn.is_in_transaction()
        assert held.run_id not in await statuses(db, [held.run_id])  # not committed yet
        more = await create_runs(db, P, 5, payload={}, per_transaction=1)
        await eventually(lambda: completed(db, more), timeout_s=60, what="5 more runs completed")
        await held.commit()
        await eventually(
            lambda: completed(db, [held.run_id]),
            timeout_s=60,
            what="alpha's run, committed at last, completed",
        )
        logged = await logged_event_ids(db)
        await eventually(
            lambda: _all_published(redis, keys, logged), timeout_s=30, what="every event published"
        )
    envelopes = await published_envelopes(redis, keys)
    check_published_in_order(envelopes, logged)
    ids = [e.event_id for e in envelopes]
    assert len(ids) == len(set(ids)), "an event was published twice without a crash"
    assert any(e.ahead_of is not None for e in envelopes)  # published ahead of the cursor
    held_events = [e for e in envelopes if e.stream_id == run_stream_id(held.run_id)]
    assert [e.version for e in held_events] == list(range(1, len(held_events) + 1))


async def _all_published(redis: Any, keys: Keys, logged: set[uuid.UUID]) -> bool:
    return logged <= {e.event_id for e in await published_envelopes(redis, keys)}


@pytest.mark.long(30)
async def test_a_relay_crash_while_a_transaction_is_held_open_loses_nothing(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_for(fast)
    async with held_open(fast) as held:
        first = await create_runs(db, P, 5, payload={}, per_transaction=1)
        crashed = Relay(settings=fast, redis=redis, keys=keys)
        stop = asyncio.Event()
        task = asyncio.create_task(run_loop(relay_spec(crashed, fast), stop))
        await eventually(
            lambda: _work_for(redis, keys, first),
            timeout_s=60,
            what="the first runs published ahead of the held transaction",
        )
        # The crash: the loop stops without a clean stop, its connection and lease just end.
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if crashed._conn is not None:
            crashed._conn.terminate()
        second = await create_runs(db, P, 5, payload={}, per_transaction=1)
        successor = Relay(settings=fast, redis=redis, keys=keys)
        async with running_relay(successor, fast):
            await eventually(
                lambda: _work_for(redis, keys, first + second),
                timeout_s=60,
                what="the runs published by the successor while the transaction is open",
            )
            await held.commit()
            logged = await logged_event_ids(db)
            await eventually(
                lambda: _all_published(redis, keys, logged),
                timeout_s=60,
                what="everything published after the commit",
            )
        await crashed.lease.close()
    check_published_in_order(await published_envelopes(redis, keys), logged)


async def _work_for(redis: Any, keys: Keys, run_ids: list[uuid.UUID]) -> bool:
    announced = {e.stream_id for e in await work_entries(redis, keys, P)}
    return {run_stream_id(r) for r in run_ids} <= announced


async def test_a_redis_loss_while_a_transaction_is_held_open_redispatches_what_was_ahead(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_for(fast)
    relay = Relay(settings=fast, redis=redis, keys=keys)
    async with held_open(fast) as held, running_relay(relay, fast):
        run_ids = await create_runs(db, P, 5, payload={}, per_transaction=1)
        await eventually(
            lambda: _work_for(redis, keys, run_ids), timeout_s=60, what="published ahead"
        )
        shard = keys.shard_of(P)
        # Redis loses the shard (as after a restart without persistence): its epoch and streams.
        await redis.delete(keys.epoch(shard), keys.work_stream(shard), keys.events_stream(shard))
        await eventually(
            lambda: _work_for(redis, keys, run_ids),
            timeout_s=60,
            what="the PENDING runs published ahead sent again by the shard's rebuild",
        )
        # The rebuild writes the new epoch last, once its entries are sent: wait for it.
        await eventually(
            lambda: redis.get(keys.epoch(shard)), timeout_s=60, what="the rebuild's new epoch"
        )
        assert held.conn.is_in_transaction()
        await held.commit()


async def test_past_its_bound_the_read_ahead_publishes_a_prefix_and_the_rest_waits_for_the_commit(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_for(fast)
    relay = Relay(settings=fast, redis=redis, keys=keys)
    relay._ahead.limit = 3  # READ_AHEAD_MAX_EVENTS, made small
    async with held_open(fast) as held, running_relay(relay, fast):
        run_ids = await create_runs(db, P, 6, payload={}, per_transaction=1)
        await eventually(
            lambda: _work_for(redis, keys, run_ids[:3]), timeout_s=60, what="3 published ahead"
        )
        await asyncio.sleep(1.0)  # many re-checks: none may publish past the bound
        assert len(await work_entries(redis, keys, P)) == 3
        assert relay._ahead.full
        await held.commit()
        logged = await logged_event_ids(db)
        await eventually(
            lambda: _all_published(redis, keys, logged), timeout_s=60, what="all after the commit"
        )
        await eventually(lambda: not relay._ahead.full, timeout_s=30, what="read-ahead resumed")
    envelopes = await published_envelopes(redis, keys)
    check_published_in_order(envelopes, logged)
    ids = [e.event_id for e in envelopes]
    assert len(ids) == len(set(ids))


async def test_a_transaction_in_progress_at_one_read_ahead_is_read_by_the_next_once_committed(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_for(fast)
    relay = Relay(settings=fast, redis=redis, keys=keys)
    # A first run of beta committed: the project's registration row is not what they wait on.
    await create_runs(db, P, 1, payload={})
    async with held_open(fast) as held, running_relay(relay, fast):
        async with held_open(fast, P) as late:  # began before the next read-ahead's snapshot
            [early] = await create_runs(db, P, 1, payload={})
            await eventually(
                lambda: _work_for(redis, keys, [early]), timeout_s=60, what="published ahead"
            )
            await eventually(
                lambda: _xid_listed(relay, late),
                timeout_s=60,
                what="a read-ahead whose snapshot saw the late transaction in progress",
            )
            await late.commit()
            await eventually(
                lambda: _work_for(redis, keys, [early, late.run_id]),
                timeout_s=60,
                what="the late transaction's run published ahead while alpha's is still open",
            )
        assert held.conn.is_in_transaction()
        await held.commit()
        logged = await logged_event_ids(db)
        await eventually(
            lambda: _all_published(redis, keys, logged), timeout_s=60, what="all after the commit"
        )
    envelopes = await published_envelopes(redis, keys)
    check_published_in_order(envelopes, logged)
    ids = [e.event_id for e in envelopes]
    assert len(ids) == len(set(ids))


def _xid_listed(relay: Relay, late: Held) -> bool:
    since = relay._ahead.since
    return since is not None and late.xid in since.xip
