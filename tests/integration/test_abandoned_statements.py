"""What the worker abandons, the server abandons too (R-18, R-19a).

A lease statement the worker gave up on (its client bound terminated the connection) must not
wait on the server and run later: the backend checks that its client is still there
(``client_connection_check_interval``) and the run pool's statements carry server-side
statement, lock and idle-in-transaction timeouts. Independently of any timing, a renewal is
fenced by worker AND attempt and never moves a lease backwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError
from awooop.loops.runs import reap_once
from awooop.runs import leases
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually

P = "proj-abandon"
SHORT = 0.05  # a lease that is over by the time the next statement runs
BOUND_S = 1.0  # the run pool's bound in these tests, client and server


@pytest.fixture
async def bounded_db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.open(database_url, max_size=2, run_timeout_s=BOUND_S)
    yield database
    await database.close()


async def claim(db: Database, run_id: uuid.UUID, worker: str, ttl: float = 30.0) -> None:
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, worker, ttl)) is not None


async def backends_waiting_on_a_lock(owner: asyncpg.Connection, table: str) -> list[int]:
    rows = await owner.fetch(
        "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
        " WHERE NOT l.granted AND l.relation = $1::regclass AND a.pid <> pg_backend_pid()",
        table,
    )
    return [r["pid"] for r in rows]


async def test_a_renewal_for_an_earlier_attempt_renews_nothing(db: Database) -> None:
    """Attempt 1 of w1 expired and w1 took the run again (attempt 2): a renewal sent for
    attempt 1 that arrives now leaves attempt 2's lease alone."""
    [run_id] = await create_runs(db, P)
    await claim(db, run_id, "w1", ttl=SHORT)
    await asyncio.sleep(SHORT * 2)
    assert await reap_once(db) == (1, 0)
    await claim(db, run_id, "w1", ttl=30)
    before = await load(db, P, run_id)
    assert before.attempt_count == 2
    stale = await db.in_run_statement(lambda c: leases.heartbeat(c, "w1", {run_id: 1}, 3600))
    assert stale == set()
    assert await load(db, P, run_id) == before
    live = await db.in_run_statement(lambda c: leases.heartbeat(c, "w1", {run_id: 2}, 60))
    assert live == {run_id}


async def test_a_renewal_never_moves_a_lease_backwards(db: Database) -> None:
    [run_id] = await create_runs(db, P)
    await claim(db, run_id, "w1", ttl=600)
    before = await load(db, P, run_id)
    renewed = await db.in_run_statement(lambda c: leases.heartbeat(c, "w1", {run_id: 1}, 5))
    assert renewed == {run_id}
    after = await load(db, P, run_id)
    assert after.lease_until == before.lease_until  # not now() + 5 s: the later lease stays


async def test_an_abandoned_renewal_leaves_the_server_and_never_runs_later(
    bounded_db: Database, database_url: str
) -> None:
    """A renewal stuck behind a table lock: the worker's bound gives up on it, and the server
    ends its statement too (within the bound and the client check), so when the lock lifts
    nothing moves the lease."""
    db = bounded_db
    [run_id] = await create_runs(db, P)
    await claim(db, run_id, "w1", ttl=600)
    before = await load(db, P, run_id)
    owner = await asyncpg.connect(database_url)
    try:
        locking = owner.transaction()
        await locking.start()
        await owner.execute("LOCK TABLE awooop_run_state IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(DatabaseUnavailableError):
            await db.in_run_statement(
                lambda c: leases.heartbeat(c, "w1", {run_id: 1}, 3600), attempts=1
            )
        # Gone from the server within the bound and a check interval (generous on a busy box).
        await eventually(
            lambda: backends_waiting_on_a_lock(owner, "awooop_run_state"),
            equals=[],
            timeout_s=15,
            what="no backend still waiting on the lock for the abandoned renewal",
        )
        await locking.rollback()
    finally:
        await owner.close()
    assert await load(db, P, run_id) == before  # the renewal never ran


async def test_the_run_pool_bounds_its_statements_on_the_server(bounded_db: Database) -> None:
    """Whatever the client does (here: nothing, it would wait forever), the server ends a
    run-pool statement at the bound: statement, lock and idle-in-transaction timeouts."""
    async with bounded_db.run_pool.acquire() as conn:
        shown = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in (
                "statement_timeout",
                "lock_timeout",
                "idle_in_transaction_session_timeout",
                "client_connection_check_interval",
            )
        }
        with pytest.raises(asyncpg.QueryCanceledError):
            await conn.execute("SELECT pg_sleep(30)")
    assert shown == {
        "statement_timeout": "1s",
        "lock_timeout": "1s",
        "idle_in_transaction_session_timeout": "1s",
        "client_connection_check_interval": "1s",
    }
