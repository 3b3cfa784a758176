"""The event log: optimistic appends, and a follower that never skips a late commit (R-30)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from awooop.core.db import Database
from awooop.core.errors import VersionConflictError
from awooop.core.events import ApprovalGranted
from awooop.core.retries import retry_transaction
from awooop.eventlog import eventlog
from tests.support.factories import T0
from tests.support.waiting import eventually

PROJECT = "p1"


def stream(name: str) -> str:
    """A stream name of PROJECT (every name in the log says whose stream it is)."""
    return f"domain/{PROJECT}/{name}"


def payload(tag: str) -> ApprovalGranted:
    return ApprovalGranted(at=T0, actor=tag)


async def test_append_checks_the_expected_version(db: Database) -> None:
    async with db.tenant(PROJECT) as conn:
        assert (
            len(
                await eventlog.append(conn, stream("s-1"), PROJECT, 0, [payload("a"), payload("b")])
            )
            == 2
        )
    async with db.tenant(PROJECT) as conn:
        with pytest.raises(VersionConflictError) as info:
            await eventlog.append(conn, stream("s-1"), PROJECT, 1, [payload("c")])
    assert info.value.code == "E-EVENT-001"
    async with db.tenant(PROJECT) as conn:
        await eventlog.append(conn, stream("s-1"), PROJECT, 2, [payload("c")])
        events = await eventlog.read_stream(conn, stream("s-1"))
    assert [e.version for e in events] == [1, 2, 3]
    assert [e.decode().actor for e in events] == ["a", "b", "c"]


async def test_a_new_stream_cannot_be_created_twice(db: Database) -> None:
    async with db.tenant(PROJECT) as conn:
        await eventlog.append(conn, stream("s-2"), PROJECT, 0, [payload("a")])
    async with db.tenant(PROJECT) as conn:
        with pytest.raises(VersionConflictError):
            await eventlog.append(conn, stream("s-2"), PROJECT, 0, [payload("a")])


@pytest.mark.connections(12)
async def test_concurrent_writers_and_a_follower_see_every_event_once_in_order(
    db: Database,
) -> None:
    """8 writers with random delays inside their transactions, a laggard whose transaction
    is older than theirs but writes after them (so commits land out of position order, on
    purpose rather than by luck), and a follower by global position: every committed event
    is seen exactly once, and each stream's events in version order."""
    committed: set[uuid.UUID] = set()
    seen: list[eventlog.RecordedEvent] = []
    streams = [stream(f"shared-{i}") for i in range(4)]
    enough = 300  # committed events; the time bound only ends a run that cannot get there
    give_up_at = time.monotonic() + 120.0
    writers_done = asyncio.Event()
    laggard_started = asyncio.Event()
    writers_ahead = asyncio.Event()  # 20 events committed by transactions newer than the laggard

    async def laggard() -> None:
        async with db.tenant(PROJECT) as conn:
            await conn.execute("SELECT pg_current_xact_id()")  # older than every writer's
            laggard_started.set()
            await asyncio.wait_for(writers_ahead.wait(), 60)  # they commit ahead of it
            await eventlog.append(conn, stream("laggard"), PROJECT, 0, [payload("laggard")])
            rows = await conn.fetch(
                "SELECT event_id FROM awooop_events WHERE stream_id = $1", stream("laggard")
            )
        committed.update(r["event_id"] for r in rows)

    async def writer(n: int) -> None:
        rng = random.Random(n)
        while len(committed) < enough and time.monotonic() < give_up_at:
            target = rng.choice([*streams, stream(f"own-{n}-{rng.randrange(50)}")])
            batch = [payload(f"w{n}") for _ in range(rng.randint(1, 3))]

            async def once(stream: str = target, batch: list[ApprovalGranted] = batch) -> None:
                async with db.tenant(PROJECT) as conn:
                    version = (
                        await conn.fetchval(
                            "SELECT version FROM awooop_event_streams WHERE stream_id = $1", stream
                        )
                        or 0
                    )
                    await conn.execute("SELECT pg_sleep($1)", rng.uniform(0, 0.03))
                    await eventlog.append(conn, stream, PROJECT, version, batch)
                    rows = await conn.fetch(
                        "SELECT event_id FROM awooop_events WHERE stream_id = $1 AND version > $2",
                        stream,
                        version,
                    )
                    await conn.execute("SELECT pg_sleep($1)", rng.uniform(0, 0.03))
                committed.update(r["event_id"] for r in rows)
                if len(committed) >= 20:
                    writers_ahead.set()

            try:
                await retry_transaction(once, attempts=50)
            except VersionConflictError:
                continue

    async def follower() -> None:
        # An empty batch does not mean "caught up": a transaction anywhere in the cluster
        # (another test database included) holds the xmin horizon back until it ends. Once
        # the writers are done, follow until every committed event arrived or time is up.
        cursor = eventlog.Cursor()
        deadline = None
        while True:
            async with db.platform() as conn:
                batch = await eventlog.read_forward(conn, cursor, limit=200)
            seen.extend(batch)
            cursor = eventlog.advance(cursor, batch)
            if not batch:
                if writers_done.is_set():
                    deadline = deadline or time.monotonic() + 30
                    if {e.event_id for e in seen} >= committed or time.monotonic() > deadline:
                        return
                await asyncio.sleep(0.005)

    follow = asyncio.create_task(follower())
    late = asyncio.create_task(laggard())
    await laggard_started.wait()
    await asyncio.gather(*(writer(n) for n in range(8)), late)
    writers_done.set()
    await follow

    counts = Counter(e.event_id for e in seen)
    assert len(committed) >= enough
    assert set(counts) == committed
    assert max(counts.values()) == 1
    versions: dict[str, list[int]] = defaultdict(list)
    for e in seen:
        versions[e.stream_id].append(e.version)
    for name, seen_versions in versions.items():
        assert seen_versions == list(range(1, len(seen_versions) + 1)), name
    # Commits really did land out of position order, or the test proved nothing.
    positions = [e.position for e in seen]
    assert positions != sorted(positions)


async def test_a_transaction_in_another_database_does_not_hold_followers_back(
    db: Database, pg_server_url: str
) -> None:
    import asyncpg

    other = await asyncpg.connect(pg_server_url)  # the server's "postgres" database
    try:
        elsewhere = other.transaction()
        await elsewhere.start()
        await other.fetchval("SELECT pg_current_xact_id()")  # holds an xid, like CREATE DATABASE
        async with db.tenant(PROJECT) as conn:
            await eventlog.append(conn, stream("s-elsewhere"), PROJECT, 0, [payload("a")])

        async def visible() -> list[str]:
            async with db.platform() as conn:
                return [e.stream_id for e in await eventlog.read_forward(conn, eventlog.Cursor())]

        # Read until visible, the other database's transaction still open: the horizon keeps
        # any xid pg_stat_activity does not place elsewhere, so the short transactions of other
        # tests' databases (that end between the snapshot and that read) may hold one read
        # back, but only the transaction left open could hold every read back.
        await eventually(visible, equals=[stream("s-elsewhere")], what="the event", timeout_s=30)
        assert other.is_in_transaction()  # open all along
        await elsewhere.rollback()
    finally:
        await other.close()


@asynccontextmanager
async def held_back(db: Database) -> AsyncIterator[None]:
    """s-before committed; s-open written by a transaction that stays open inside the block
    (it commits on leaving); s-after committed by a newer transaction meanwhile."""
    async with db.tenant(PROJECT) as conn:
        await eventlog.append(conn, stream("s-before"), PROJECT, 0, [payload("a")])
    async with db.tenant(PROJECT) as holder:
        await eventlog.append(holder, stream("s-open"), PROJECT, 0, [payload("b")])
        async with db.tenant(PROJECT) as conn:
            await eventlog.append(conn, stream("s-after"), PROJECT, 0, [payload("c")])
        yield


async def followed(db: Database) -> list[str]:
    async with db.platform() as conn:
        return [e.stream_id for e in await eventlog.read_forward(conn, eventlog.Cursor())]


async def test_a_transaction_in_this_database_holds_followers_back(db: Database) -> None:
    async with held_back(db):
        # s-after committed, but an older transaction of this database is still open: the
        # follower stops before it, so it cannot skip s-open when that commits.
        assert await followed(db) == [stream("s-before")]
    # Once s-open commits, a read passes both. Not always the first read: a transaction of
    # another database that ends between the read's snapshot and its look at
    # pg_stat_activity counts as still running (FOLLOWER_HORIZON keeps what it cannot place),
    # and the other test processes' transactions come and go all the time.
    everything = [stream("s-before"), stream("s-open"), stream("s-after")]
    await eventually(lambda: followed(db), equals=everything, what="the follower past s-after")


async def test_the_relay_read_says_how_long_a_committed_event_has_been_held_back(
    db: Database,
) -> None:
    async with db.platform() as conn:
        batch, held = await eventlog.read_forward_and_held(conn, eventlog.Cursor())
    assert (batch, held) == ([], None)  # empty log: one row of NULLs, read as nothing
    async with held_back(db):
        await asyncio.sleep(0.05)  # the committed event is held back for a while
        async with db.platform() as conn:
            batch, held = await eventlog.read_forward_and_held(conn, eventlog.Cursor())
            plain = await eventlog.read_forward(conn, eventlog.Cursor())
            probed = await eventlog.held_back(conn, eventlog.advance(eventlog.Cursor(), plain))
        assert batch == plain
        assert [e.stream_id for e in batch] == [stream("s-before")]
        assert held is not None and 0.05 <= held < 5  # s-after waits behind s-open
        assert probed is not None and held <= probed < 5

    async def released() -> tuple[object, ...]:
        async with db.platform() as conn:
            batch, held = await eventlog.read_forward_and_held(conn, eventlog.Cursor(), limit=2)
            rest, held_after = await eventlog.read_forward_and_held(
                conn, eventlog.advance(eventlog.Cursor(), batch)
            )
            probed = await eventlog.held_back(conn, eventlog.advance(eventlog.Cursor(), rest))
        return [e.stream_id for e in batch], held, [e.stream_id for e in rest], held_after, probed

    # Once s-open commits: nothing committed is held back any more (the first batch was only
    # full), as soon as no other database's transaction ends mid-read (see the test above).
    await eventually(
        released,
        equals=([stream("s-before"), stream("s-open")], None, [stream("s-after")], None, None),
        what="every event read, none held back",
    )
