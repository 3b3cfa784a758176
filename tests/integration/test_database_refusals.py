"""A database that refuses writes for a while is a fault the runtime rides out (R-19a).

Each test changes only its own database (``ALTER DATABASE``, ``REVOKE``, a table lock): a
read-only window whose sessions outlive it, a revoked privilege, a lock held past the ingest's
bound. HTTP ingest answers a typed 503 with ``Retry-After`` meanwhile, writes nothing, leaves
nothing running on the server, and serves again once the database does, with no restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import asyncpg
import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DatabaseRefusedError
from awooop.core.events import run_stream_id
from awooop.worker.assembly import build_worker
from tests.support import handlers
from tests.support.handlers import effects_of
from tests.support.ingest import COUNTED, Ingest, ingest_app
from tests.support.runs import create_runs, has_status, load
from tests.support.waiting import eventually
from tests.support.webhooks import fresh

P = "proj-refusals"


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


@pytest.fixture
async def owner(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    yield conn
    await conn.close()


async def end_other_sessions(owner: asyncpg.Connection) -> None:
    """End every other session of this database: the pools open new ones (during a read-only
    window, read-only for life)."""
    await owner.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )


async def counts(owner: asyncpg.Connection) -> dict[str, int]:
    """The rows a delivery writes, read on the owner's own connection (the app's pools may
    hold sessions this test ended)."""
    return {t: await owner.fetchval(query) for t, query in COUNTED.items()}


async def refused_then_served(
    ingest: Ingest,
    owner: asyncpg.Connection,
    refuse: Callable[[], Awaitable[None]],
    restore: Callable[[], Awaitable[None]],
) -> None:
    """While refused: 503 E-DB-002 with Retry-After and nothing written. Once restored: the
    same app (no restart) answers 202 within a few requests."""
    await refuse()
    before = await counts(owner)
    for _ in range(3):
        response = await ingest.post(fresh("api"))
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "E-DB-002"
        assert int(response.headers["Retry-After"]) > 0
    assert await counts(owner) == before
    await restore()

    async def served() -> bool:
        return (await ingest.post(fresh("api"))).status_code == 202

    await eventually(served, interval_s=0.2, what="ingest served again without a restart")


async def test_a_read_only_window_is_answered_503_and_ridden_out(
    settings: Settings, database_url: str, owner: asyncpg.Connection
) -> None:
    name = database_name(database_url)

    async def read_only() -> None:
        await owner.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        await end_other_sessions(owner)

    async def writable() -> None:
        # Sessions opened during the window keep it: the pools must drop them themselves.
        await owner.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')

    async with ingest_app(settings) as ingest:
        await refused_then_served(ingest, owner, read_only, writable)


async def test_a_revoked_privilege_is_answered_503_and_ridden_out(
    settings: Settings, owner: asyncpg.Connection
) -> None:
    async def revoke() -> None:
        await owner.execute("REVOKE INSERT ON awooop_run_state FROM awooop_app")

    async def grant() -> None:
        await owner.execute("GRANT INSERT ON awooop_run_state TO awooop_app")

    async with ingest_app(settings) as ingest:
        await refused_then_served(ingest, owner, revoke, grant)


async def test_an_ingest_behind_a_lock_answers_503_in_time_and_leaves_nothing_running(
    settings: Settings, owner: asyncpg.Connection
) -> None:
    bounded = msgspec.structs.replace(settings, ingest_timeout_s=1.0)
    async with ingest_app(bounded) as ingest:
        assert (await ingest.post(fresh("api"))).status_code == 202  # sessions are open
        before = await counts(owner)
        locking = owner.transaction()
        await locking.start()
        await owner.execute("LOCK TABLE awooop_run_state IN ACCESS EXCLUSIVE MODE")
        try:
            response = await ingest.post(fresh("api"))
            assert response.status_code == 503, response.text
            assert response.json()["code"] == "E-DB-003"
            assert int(response.headers["Retry-After"]) > 0
            waiting = (
                "SELECT count(*) FROM pg_locks WHERE NOT granted"
                " AND relation = 'awooop_run_state'::regclass"
            )
            await eventually(
                lambda: owner.fetchval(waiting),
                equals=0,
                timeout_s=15,
                what="no ingest statement left waiting on the lock",
            )
        finally:
            await locking.rollback()
        assert await counts(owner) == before
        assert (await ingest.post(fresh("api"))).status_code == 202


@pytest.mark.connections(13)
async def test_a_worker_rides_out_a_read_only_window_without_a_restart(
    settings: Settings, database_url: str, owner: asyncpg.Connection
) -> None:
    """Runs submitted before the window wait while every session the worker opens is
    read-only (no claim can be written, so none is charged), and all complete after it."""
    name = database_name(database_url)
    db = await Database.open(database_url, max_size=4, run_timeout_s=settings.lease_io_timeout_s)
    quick = msgspec.structs.replace(settings, poll_interval_s=0.2)
    run_ids = await create_runs(db, P, 5, payload={})
    worker = build_worker(db=db, settings=quick, handler=handlers.journaled, concurrency=4).worker
    await owner.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    await end_other_sessions(owner)
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.sleep(2.0)  # ten polls that can only fail
        states = [await load(db, P, r) for r in run_ids]
        assert {(s.status, s.attempt_count) for s in states} == {("PENDING", 0)}
        await owner.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')

        async def all_completed() -> bool:
            done = [await load(db, P, r) for r in run_ids]
            return all(s.status == "COMPLETED" for s in done)

        await eventually(all_completed, what="every run completed after the window")
        assert {(await load(db, P, r)).attempt_count for r in run_ids} == {1}
    finally:
        stop.set()
        await serving
        await db.close()


async def test_the_producer_library_raises_typed_refusals(
    db: Database, owner: asyncpg.Connection
) -> None:
    """With INSERT revoked, submit and emit raise E-DB-002 (retryable), through a Database and
    in the caller's transaction alike, and write nothing; once granted they work again."""
    event = producer.ChannelEvent("api", "k-1", {})
    domain = producer.DomainEvent("orders", "OrderPlaced", {"id": 1})
    await owner.execute("REVOKE INSERT ON awooop_run_state, awooop_events FROM awooop_app")
    try:
        with pytest.raises(DatabaseRefusedError) as refused:
            await producer.submit(db, P, event)
        assert refused.value.code == "E-DB-002" and refused.value.retryable
        with pytest.raises(DatabaseRefusedError):
            await producer.emit(db, P, domain)
        async with db.tenant_pool.acquire() as conn, conn.transaction():
            await producer.set_tenant(conn, P)
            with pytest.raises(DatabaseRefusedError):
                await producer.submit(conn, P, event)
    finally:
        await owner.execute("GRANT INSERT ON awooop_run_state, awooop_events TO awooop_app")
    assert await owner.fetchval("SELECT count(*) FROM awooop_run_state") == 0
    assert (await producer.submit(db, P, event)).created


async def test_an_attempt_cut_off_by_a_refusing_database_is_handed_back_uncharged(
    fast: Settings, owner: asyncpg.Connection
) -> None:
    """Step two's journal write is refused (UPDATE revoked from the run pool's role) after step
    one was journaled: the attempt is abandoned, and once the database takes writes again the
    worker hands the run back uncharged (no restart, no lease left to run out, no reaper), and
    the next attempt completes without repeating step one, with the run's budget whole."""
    # A lease long enough that the give-back outlives the refusal on a loaded machine, and a
    # handler that waits 3 s between its steps: the refusal starts after step one's journal
    # write committed and before step two's.
    quick = msgspec.structs.replace(fast, lease_ttl_s=20.0, heartbeat_interval_s=0.5)
    db = await Database.open(quick.database_url, max_size=4, run_timeout_s=quick.lease_io_timeout_s)
    [run_id] = await create_runs(db, P, payload={"sleep": 3.0})
    worker = build_worker(db=db, settings=quick, handler=handlers.journaled, concurrency=2).worker
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.run(stop))
    try:
        await eventually(
            lambda: owner.fetchval(
                "SELECT saga_steps ? 'one' FROM awooop_run_state WHERE run_id = $1", run_id
            ),
            what="step one journaled",
        )
        await owner.execute("REVOKE UPDATE ON awooop_run_state FROM awooop_platform")
        try:
            # Step two runs (its side effect comes before its journal write), then its write
            # is refused and the give-back's tries are refused too, for a while.
            await eventually(lambda: effects_of(run_id, "two"), what="step two ran")
            await asyncio.sleep(1.0)
        finally:
            await owner.execute("GRANT UPDATE ON awooop_run_state TO awooop_platform")

        await eventually(
            lambda: has_status(db, P, run_id, "COMPLETED"),
            what="the run completed in its next attempt",
        )
    finally:
        stop.set()
        await serving
        await db.close()
    state = await owner.fetchrow(
        "SELECT attempt_count, max_attempts FROM awooop_run_state WHERE run_id = $1", run_id
    )
    assert (state["attempt_count"], state["max_attempts"]) == (2, quick.max_attempts + 1)
    rows = await owner.fetch(
        "SELECT event_type FROM awooop_events WHERE stream_id = $1 ORDER BY version",
        run_stream_id(run_id),
    )
    names = [r["event_type"] for r in rows]
    assert "RunRequeued" not in names and names.count("LeaseReleased") == 1
    assert len(effects_of(run_id, "one")) == 1  # journaled, not repeated
    assert len(effects_of(run_id, "two")) == 2  # its journal write was refused: run again
