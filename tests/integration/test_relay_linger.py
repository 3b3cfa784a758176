"""The events' NOTIFY names statements that wrote a dispatch event (migration 0071; one the
same statement claimed is none: 0154), and the relay publishes those at once while other
events wait up to AWOOOP_RELAY_LINGER_S."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from typing import Any

import msgspec

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import DISPATCH_EVENT_TYPES
from awooop.core.pools import connect
from awooop.runs import leases, pauses
from awooop.runs.pauses import Scope
from awooop.streams.envelope import FIELD, decode_envelope
from awooop.streams.relay import Relay
from awooop.streams.relay_wakeup import DISPATCH_PAYLOAD, EVENTS_PAYLOAD, NOTIFY_CHANNEL
from tests.support.runs import create_runs, load
from tests.support.streams import claim, create_run, keys_for, running_relay
from tests.support.waiting import eventually

P = "proj-linger"


async def test_the_trigger_knows_the_dispatch_types(db: Database) -> None:
    async with db.platform() as conn:
        source = await conn.fetchval(
            "SELECT prosrc FROM pg_proc WHERE proname = 'awooop_notify_relay_events'"
        )
    assert set(re.findall(r"'([A-Za-z]+)'", source.split("IN (", 1)[1].split(")", 1)[0])) == set(
        DISPATCH_EVENT_TYPES
    )


async def test_a_dispatch_statement_and_an_other_one_notify_differently(
    db: Database, database_url: str
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await connect(database_url)
    await listener.add_listener(NOTIFY_CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        run_id = await create_run(db, P)
        assert await asyncio.wait_for(heard.get(), 5) == DISPATCH_PAYLOAD
        await claim(db, P, run_id)
        assert await asyncio.wait_for(heard.get(), 5) == EVENTS_PAYLOAD
        assert heard.empty()
    finally:
        await listener.close()


async def test_a_timer_fired_and_claimed_in_one_statement_is_no_dispatch(
    db: Database, database_url: str
) -> None:
    """A worker's fire of its own sleeps (fire_claim.sql) that claims the run in the same
    statement rings the relay as other events do (no worker waits for that TimerFired); one
    that leaves a run fired (its project paused) rings it for dispatch."""
    paused = "proj-linger-paused"
    [taken] = await create_runs(db, P, 1)
    [left] = await create_runs(db, paused, 1)
    statements = leases.RunStatements(db)
    for run_id in (taken, left):
        await statements.claim_many([run_id], "w1", 30)
        await statements.sleep_many(
            [leases.Sleep(run_id, "w1", 1, step="sleep:1", delay=timedelta(0))]
        )
    await db.in_tenant(
        paused,
        lambda c: pauses.pause(c, paused, Scope.PROJECT, "", reason="test", actor="test"),
    )
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await connect(database_url)
    await listener.add_listener(NOTIFY_CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        for run_id, project, payload, claimed in (
            (taken, P, EVENTS_PAYLOAD, True),
            (left, paused, DISPATCH_PAYLOAD, False),
        ):
            state = await load(db, project, run_id)
            written = await statements.fire_claim([(run_id, state.version)], "w2", 30, None)
            assert [(s.run_id, c) for s, c in written] == [(run_id, claimed)]
            assert await asyncio.wait_for(heard.get(), 5) == payload
        assert heard.empty()
    finally:
        await listener.close()


async def test_the_relay_publishes_dispatch_events_at_once_and_lets_the_others_linger(
    settings: Settings, db: Database, redis: Any
) -> None:
    # A long poll interval: only NOTIFY and the linger timer wake the relay here.
    settings = msgspec.structs.replace(settings, relay_linger_s=0.8, relay_poll_interval_s=60.0)
    keys = keys_for(settings)
    stream = keys.events_stream(keys.shard_of(P))
    published: list[str] = []
    published_ms: list[int] = []  # each entry's id: the Redis clock when it was added

    async def read() -> None:
        entries = await redis.xrange(stream)
        published[:] = [decode_envelope(fields[FIELD]).event_type for _id, fields in entries]
        published_ms[:] = [int(_id.split(b"-")[0]) for _id, _fields in entries]

    async def published_are(*types: str) -> bool:
        await read()
        return published == list(types)

    relay = Relay(settings=settings, redis=redis, keys=keys)
    async with running_relay(relay, settings):
        await eventually(lambda: relay.is_leader, what="the relay leads")
        # Its first read done: a read still under way when the run's notice arrives would be
        # followed by another one at once, which could take the claim below early.
        await eventually(lambda: relay.caught_up, interval_s=0.01, what="the relay idle")
        started = time.monotonic()
        run_id = await create_run(db, P)
        await eventually(
            lambda: published_are("RunCreated"), interval_s=0.01, what="RunCreated published"
        )
        assert time.monotonic() - started < 0.6  # at once, not after the linger
        before_claim = time.time()  # the claim commits after this instant
        await claim(db, P, run_id)
        claimed = time.monotonic()
        await asyncio.sleep(0.3)  # within the linger
        await read()
        if time.monotonic() - claimed < 0.7:  # (a loaded machine may have slept past it)
            assert published == ["RunCreated"]  # RunClaimed lingers
        await eventually(
            lambda: published_are("RunCreated", "RunClaimed"),
            timeout_s=10,
            interval_s=0.01,
            what="RunClaimed published after its linger",
        )
        # Added to the stream at least the linger after the claim committed (one machine,
        # one clock; 50 ms for the clocks' resolution).
        assert published_ms[1] / 1000 - before_claim >= 0.75
