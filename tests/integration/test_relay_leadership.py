"""Relay leadership by lease and term (R-19): a frozen leader is replaced within the lease, and
its writes after it resumes are refused by Postgres (awooop/core/leadership.py,
streams/relay_cursor.py, streams/relay_shards.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import asyncpg
import msgspec
import pytest
from structlog.testing import capture_logs

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import LeadershipLostError
from awooop.core.leadership import Lease
from awooop.core.loops import LoopContext
from awooop.streams.consumer import GroupConsumer
from awooop.streams.keys import projector_group
from awooop.streams.relay import Relay
from awooop.streams.relay_cursor import LEADERSHIP, RelayCursor
from tests.support.streams import (
    Collector,
    check_published_in_order,
    claim,
    committed_event_ids,
    create_run,
    first_occurrences,
    keys_for,
    published_envelopes,
    running_consumer,
    running_relay,
    step,
)
from tests.support.waiting import eventually

PROJECTS = [f"lead{i}" for i in range(6)]


def fast_settings(settings: Settings) -> Settings:
    return msgspec.structs.replace(
        settings,
        relay_poll_interval_s=0.1,
        relay_leader_lease_s=1.5,
        relay_leader_renew_s=0.3,
        relay_batch_size=20,
    )


async def seconds_to_take_over(leader_stopped: asyncio.Event, standby: Relay) -> float:
    """Once the leader's loop stopped (frozen, stuck), how long until the standby publishes."""
    await asyncio.wait_for(leader_stopped.wait(), 20)
    stopped_at = time.monotonic()
    await eventually(
        lambda: standby.published > 0,
        timeout_s=60,
        what="the standby publishes while the leader's loop is stopped",
    )
    return time.monotonic() - stopped_at


async def cursor_row(db: Database) -> Any:
    async with db.platform() as conn:
        return await conn.fetchrow("SELECT * FROM awooop_relay_cursor WHERE name = 'events'")


async def test_a_lease_is_taken_only_when_it_ran_out_and_each_acquisition_is_a_new_term(
    settings: Settings, db: Database
) -> None:
    fast = fast_settings(settings)

    def lease(holder: str) -> Lease:
        return Lease(
            database_url=fast.database_url,
            name=LEADERSHIP,
            holder=holder,
            lease_s=fast.relay_leader_lease_s,
            renew_s=fast.relay_leader_renew_s,
        )

    a, b = lease("a"), lease("b")
    try:
        assert await a.acquire()
        first = a.term
        assert not await b.acquire()  # a renews: b never gets it while a is alive
        await asyncio.sleep(fast.relay_leader_lease_s + 0.5)  # past a lease: a's renewals hold it
        assert not await b.acquire()
        a.check()
        # a stops renewing (frozen) without giving the lease back: b gets it once it ran out.
        await a._stop_renewer()
        await eventually(
            b.acquire,
            timeout_s=fast.relay_leader_lease_s + 10,
            what="b takes the lease once it ran out",
        )
        second = b.term
        assert second is not None and first is not None and second > first
        with pytest.raises(LeadershipLostError):
            a.check()  # its own clock says the lease ran out
        await b.release()
        assert await a.acquire()  # released: taken at once, with yet another term
        assert a.term is not None and a.term > second
    finally:
        await a.close()
        await b.close()


@pytest.mark.connections(10)
async def test_a_frozen_leader_is_replaced_and_its_writes_are_refused_after_it_resumes(
    settings: Settings, db: Database, redis: Any
) -> None:
    """Two relays in one process; the leader is frozen after an XADD and before its cursor
    moves (its loop and its lease renewals both wait). The standby publishes within lease +
    poll interval; when the old leader resumes it steps down (its cursor save refused by the
    term fence, or its clock past the lease before its next XADD), and a save with its term is
    refused. Every committed event reaches the projector group, each run's first
    copies in version order with no version missing, and the saved cursor never moves back."""
    fast = fast_settings(settings)
    keys = keys_for(fast)
    frozen = asyncio.Event()
    freeze = False
    thaw = asyncio.Event()

    async def freezer(point: str) -> None:
        # The loop stops right after an XADD; its renewals stop from then on too (one may
        # still land while the loop is being frozen: the bound below allows for it).
        if (freeze and point == "published") or (frozen.is_set() and point == "renew"):
            frozen.set()
            await thaw.wait()

    old = Relay(settings=fast, redis=redis, keys=keys, relay_id="old", fault_hook=freezer)
    new = Relay(settings=fast, redis=redis, keys=keys, relay_id="new")
    collected = Collector()
    group = GroupConsumer(
        redis,
        group=projector_group("lead"),
        consumer="p1",
        streams=[keys.events_stream(s) for s in keys.shards()],
        handler=collected,
        keys=keys,
        block_ms=100,
    )
    await group.ensure_groups()
    stop = asyncio.Event()
    cursors: list[tuple[int, int]] = []

    async def produce(index: int) -> None:
        n = 0
        while not stop.is_set():
            project = PROJECTS[(index + n) % len(PROJECTS)]
            run_id = await create_run(db, project)
            await claim(db, project, run_id)
            for s in range(3):
                await step(db, project, run_id, f"s{s}")
            n += 1

    async def watch_cursor() -> None:
        while not stop.is_set():
            row = await cursor_row(db)
            cursors.append((row["tx_id"], row["position"]))
            await asyncio.sleep(0.01)

    with capture_logs() as logs:
        async with running_relay(old, fast), running_consumer(group):
            await eventually(lambda: old.is_leader, what="the old relay leads")
            async with running_relay(new, fast):
                tasks = [asyncio.create_task(produce(i)) for i in range(3)]
                tasks.append(asyncio.create_task(watch_cursor()))
                try:
                    await eventually(
                        lambda: old.published > 30,
                        what="more than 30 events published by the old leader",
                    )
                    assert not new.is_leader
                    freeze = True
                    took_over_s = await seconds_to_take_over(frozen, new)
                    thaw.set()
                    await eventually(
                        lambda: not old.is_leader,
                        timeout_s=30,
                        what="the resumed old leader steps down",
                    )
                    await asyncio.sleep(0.5)  # the new leader keeps publishing meanwhile
                finally:
                    stop.set()
                    await asyncio.gather(*tasks)
                committed = await committed_event_ids(db)
                await eventually(
                    lambda: collected.event_ids() == committed,
                    timeout_s=60,
                    what="every committed event at the projector group",
                )
                assert new.is_leader and not old.is_leader

    # Within the documented bound (lease + poll interval; + one renewal interval here, see the
    # freezer), plus room for a loaded machine.
    bound = fast.relay_leader_lease_s + fast.relay_poll_interval_s + fast.relay_leader_renew_s
    assert took_over_s < bound + 5.0, took_over_s
    lost = [e for e in logs if e["event"] == "relay_leadership_lost"]
    assert [e["relay_id"] for e in lost] == ["old"], lost
    # Resumed, the old leader learns that it lost from Postgres (its cursor save refused) or
    # from its own clock before its next XADD, whichever comes first at the machine's pace;
    # either way the cursor stays the new leader's (below).
    reason = lost[0]["reason"]
    assert "cursor save was refused" in reason or "ran out" in reason, lost[0]
    row = await cursor_row(db)
    assert row["leader"] == "new"
    # Whatever its clock says, the old term cannot move the cursor: the save is fenced by it.
    stale = RelayCursor("old")
    async with db.platform_writes() as conn:
        await stale.load(conn)
        stale.advance([])
        with pytest.raises(LeadershipLostError, match="cursor save was refused"):
            await stale.save(conn, lost[0]["term"])
    assert (await cursor_row(db))["leader"] == "new"
    assert cursors == sorted(cursors)  # the saved cursor never moved backwards
    for stream_id, versions in collected.versions_by_stream().items():
        assert first_occurrences(versions) == sorted(set(versions)), stream_id
        assert sorted(set(versions)) == list(range(1, max(versions) + 1)), stream_id


async def test_a_resumed_leader_publishes_nothing_once_its_local_deadline_passed(
    settings: Settings, db: Database, redis: Any
) -> None:
    """A leader that wakes up after its lease ran out steps down at its first check, before
    any XADD, even when nobody took the lease meanwhile."""
    fast = fast_settings(settings)
    keys = keys_for(fast)
    relay = Relay(settings=fast, redis=redis, keys=keys, relay_id="sleepy")
    try:
        await create_run(db, "p1")
        assert await relay.drain() == 1
        await relay.lease._stop_renewer()  # frozen: no renewals
        await asyncio.sleep(fast.relay_leader_lease_s)  # the lease runs out while it sleeps
        await create_run(db, "p1")
        with pytest.raises(LeadershipLostError):
            await relay.drain()
        assert await redis.xlen(keys.events_stream(keys.shard_of("p1"))) == 1
    finally:
        with contextlib.suppress(LeadershipLostError):
            await relay.close()
    successor = Relay(settings=fast, redis=redis, keys=keys)
    try:
        assert await successor.drain() == 1
    finally:
        await successor.close()
    assert await redis.xlen(keys.events_stream(keys.shard_of("p1"))) == 2


@pytest.mark.long
async def test_a_leader_stuck_in_a_call_gives_its_lease_back_and_a_standby_publishes(
    settings: Settings, db: Database, redis: Any
) -> None:
    """The leader's loop hangs in a call that does not return (after an XADD, before its cursor
    moves) while its process keeps renewing the lease. It gives the lease back once no work
    finished for AWOOOP_RELAY_STALL_S, the standby publishes, and when the call returns the old
    leader publishes nothing more and steps down. Every committed event is in the streams, each
    run's first copies in version order."""
    fast = msgspec.structs.replace(
        fast_settings(settings), redis_socket_timeout_s=2.0, relay_stall_s=5.0
    )
    keys = keys_for(fast)
    hang = False
    stuck = asyncio.Event()
    returns = asyncio.Event()

    async def hanger(point: str) -> None:
        if hang and point == "published":  # the loop only: renewals go on
            stuck.set()
            await returns.wait()

    old = Relay(settings=fast, redis=redis, keys=keys, relay_id="old", fault_hook=hanger)
    new = Relay(settings=fast, redis=redis, keys=keys, relay_id="new")
    with capture_logs() as logs:
        async with running_relay(old, fast):
            await eventually(lambda: old.is_leader, what="the old relay leads")
            async with running_relay(new, fast):
                try:
                    await create_run(db, "p1")
                    await eventually(lambda: old.published == 1, what="the old leader publishes")
                    hang = True
                    await create_run(db, "p2")
                    took_over_s = await seconds_to_take_over(stuck, new)
                    assert old.lease.lost_reason is not None
                    assert "no work finished" in old.lease.lost_reason
                    # Read before the commit: the new leader, in this event loop, may publish
                    # p3 before create_run returns.
                    published_by_new = new.published
                    await create_run(db, "p3")
                    await eventually(
                        lambda: new.published > published_by_new,
                        what="the new leader publishes the next run",
                    )
                finally:
                    returns.set()
                await eventually(
                    lambda: not old.is_leader,
                    what="the old leader steps down once its call returns",
                )
                # p2's batch went out before the hang (the one late call), nothing after it.
                assert old.published == 2
                assert new.is_leader

    # Given back within stall + one renewal interval, led by the standby one poll later; plus
    # room for a loaded machine.
    bound = fast.relay_stall_s + fast.relay_leader_renew_s + fast.relay_poll_interval_s
    assert took_over_s < bound + 5.0, took_over_s
    assert took_over_s > fast.relay_stall_s - 1.0, took_over_s  # not before the bound
    lost = [e for e in logs if e["event"] == "relay_leadership_lost"]
    assert [e["relay_id"] for e in lost] == ["old"], lost
    check_published_in_order(await published_envelopes(redis, keys), await committed_event_ids(db))


@pytest.mark.parametrize("renewer", ["waits_on_the_lock", "gets_no_turn"])
async def test_a_statement_cancelled_after_the_lease_ran_out_ends_the_lead_not_the_loop(
    settings: Settings, db: Database, redis: Any, renewer: str
) -> None:
    """The leader's read waits on a lock while its lease cannot be renewed (the renewal waits
    on another lock, or the renewer gets no turn at all, as in a starved or stopped process):
    the lease runs out on the leader's clock, then the server's bound (no statement outlives the
    lease) cancels the read. That is the leadership lost (relay_leadership_lost, the iteration
    ends normally, the lease given up), not the database gone (no DatabaseUnavailableError, no
    failed iteration), whether or not the renewer has said so yet. A successor then publishes
    the run committed before the locks: nothing lost."""
    fast = fast_settings(settings)
    keys = keys_for(fast)
    released = asyncio.Event()

    async def starve(point: str) -> None:
        if renewer == "gets_no_turn" and locked and point == "renew":
            await released.wait()

    locked = False
    relay = Relay(settings=fast, redis=redis, keys=keys, relay_id="locked-out", fault_hook=starve)
    ctx = LoopContext(project_id=PLATFORM_PROJECT)
    await relay.step(ctx)
    assert relay.is_leader
    await create_run(db, "p1")
    blocker = await asyncpg.connect(fast.database_url)
    try:
        async with blocker.transaction():
            await blocker.execute(
                "SELECT 1 FROM awooop_leaders WHERE name = $1 FOR UPDATE", LEADERSHIP
            )
            await blocker.execute("LOCK TABLE awooop_events IN ACCESS EXCLUSIVE MODE")
            locked = True
            with capture_logs() as logs:
                started = time.monotonic()
                await asyncio.wait_for(relay.step(ctx), 30)  # returns: no exception
                waited_s = time.monotonic() - started
    finally:
        released.set()
        await blocker.close()
        await relay.close()
    assert waited_s >= fast.relay_leader_lease_s * 0.5, waited_s  # it did wait on the lock
    events = [e["event"] for e in logs]
    lost = [e for e in logs if e["event"] == "relay_leadership_lost"]
    assert [e["relay_id"] for e in lost] == ["locked-out"], events
    assert "ran out" in lost[0]["reason"], lost
    assert relay.lease.term is None and not relay.is_leader
    assert relay.published == 0
    successor = Relay(settings=fast, redis=redis, keys=keys)
    try:
        assert await successor.drain() == 1
    finally:
        await successor.close()
    assert await redis.xlen(keys.events_stream(keys.shard_of("p1"))) == 1
