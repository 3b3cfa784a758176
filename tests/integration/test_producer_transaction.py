"""``producer.transaction``: a caller's transaction opened with its tenant set in one round trip,
on a producer service's pool, logged in as a real login bound to ``shop`` (``victim`` holds
rows of its own). The same guards as ``conn.transaction()`` + ``set_tenant``: the login writes
nothing of another project whatever it opens the transaction for, a refusal is typed and leaves
the transaction usable, and the block commits or rolls back as a whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from awooop import producer
from awooop.core.db import Database
from awooop.core.errors import (
    InvalidInputError,
    ProducerConnectionError,
    ProducerTransactionError,
    TenantNotGrantedError,
)
from awooop.producer import ChannelEvent, DomainEvent
from tests.support import tenant_rows
from tests.support.ingest import counts
from tests.support.logins import Login, bound_login

SHOP, VICTIM = "shop", "victim"
TENANT = "SELECT current_setting('awooop.project_id', true)"


@pytest.fixture
async def login(db: Database, database_url: str) -> AsyncIterator[Login]:
    """A login bound to SHOP, with a table of its own; VICTIM holds rows in every tenant
    table."""
    for project in (VICTIM, SHOP):
        await tenant_rows.seed_project(db, project)
    async with bound_login(database_url, [SHOP]) as service:
        owner = await asyncpg.connect(database_url)
        try:
            await owner.execute("CREATE TABLE orders (id int PRIMARY KEY)")
            await owner.execute(f"GRANT SELECT, INSERT ON orders TO {service.role}")
            yield service
            await owner.execute("DROP TABLE orders")  # its grant, before the role goes
        finally:
            await owner.close()


@pytest.fixture
async def pool(login: Login) -> AsyncIterator[Any]:
    pool = await producer.create_pool(login.url, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def runs_of(db: Database, project: str) -> list[str]:
    async with db.tenant(project) as conn:
        rows = await conn.fetch(
            "SELECT DISTINCT d.provider_event_id FROM awooop_channel_event_dedupe d "
            "JOIN awooop_run_state r USING (run_id) WHERE d.provider_event_id LIKE 'order-%' "
            "ORDER BY 1"
        )
    return [r["provider_event_id"] for r in rows]


async def test_one_query_opens_it_with_the_tenant_and_the_block_commits(
    db: Database, pool: Any
) -> None:
    sent: list[str] = []
    async with pool.acquire() as conn:
        conn.add_query_logger(lambda logged: sent.append(logged.query))
        async with producer.transaction(conn, SHOP) as same:
            assert same is conn and conn.is_in_transaction()
            assert await conn.fetchval(TENANT) == SHOP
            await conn.execute("INSERT INTO orders VALUES (1)")
            result = await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {}))
            emitted = await producer.emit(conn, SHOP, DomainEvent("order-1", "OrderPaid", {}))
        assert not conn.is_in_transaction()
        assert await conn.fetchval(TENANT) in (None, "")  # transaction-local
        assert await conn.fetchval("SELECT count(*) FROM orders") == 1
    assert result.created and emitted.version == 1
    assert sent[0] == "BEGIN; SET LOCAL awooop.project_id = 'shop'"
    assert sent[1] == TENANT  # nothing else before the caller's first statement
    assert "COMMIT" in sent
    assert await runs_of(db, SHOP) == ["order-1"]


async def test_an_exception_in_the_block_rolls_everything_back(db: Database, pool: Any) -> None:
    class Abort(Exception):
        pass

    async def submit_then_abort(conn: Any) -> None:
        async with producer.transaction(conn, SHOP):
            await conn.execute("INSERT INTO orders VALUES (1)")
            assert (await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {}))).created
            raise Abort

    async with pool.acquire() as conn:
        with pytest.raises(Abort):
            await submit_then_abort(conn)
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT count(*) FROM orders") == 0
        async with producer.transaction(conn, SHOP):  # the connection serves on
            await producer.submit(conn, SHOP, ChannelEvent("api", "order-2", {}))
    assert await runs_of(db, SHOP) == ["order-2"]  # order-1 left nothing
    assert await runs_of(db, VICTIM) == []


async def test_a_login_of_shop_opening_it_for_victim_writes_nothing_and_stays_usable(
    db: Database, pool: Any
) -> None:
    before = await counts(db)
    async with pool.acquire() as conn:
        async with producer.transaction(conn, VICTIM):
            for attempt in (
                producer.submit(conn, VICTIM, ChannelEvent("api", "order-steal", {})),
                producer.submit_many(conn, VICTIM, [ChannelEvent("api", "order-steal-2", {})]),
                producer.emit(conn, VICTIM, DomainEvent("orders", "OrderPaid", {})),
            ):
                with pytest.raises(TenantNotGrantedError) as refusal:
                    await attempt
                assert refusal.value.code == "E-INGEST-003"
            # the refusals came before any write: the transaction is usable, and sees nothing
            assert await conn.fetchval("SELECT count(*) FROM awooop_run_state") == 0
            await conn.execute("INSERT INTO orders VALUES (1)")
        assert await conn.fetchval("SELECT count(*) FROM orders") == 1  # committed
        # written by hand, past the library, the policy refuses victim's row
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with producer.transaction(conn, VICTIM):
                await conn.execute(
                    "INSERT INTO awooop_channel_event_dedupe (project_id, channel_type, "
                    "provider_event_id, window_start, run_id, expires_at) VALUES ($1, 'api', "
                    "'order-steal-3', awooop_dedupe_window(now()), gen_random_uuid(), "
                    "now() + interval '1 day')",
                    VICTIM,
                )
        assert not conn.is_in_transaction()
    assert await counts(db) == before
    assert await runs_of(db, VICTIM) == []


async def test_a_submit_for_another_project_than_the_transactions_is_refused_and_it_goes_on(
    db: Database, pool: Any
) -> None:
    async with pool.acquire() as conn, producer.transaction(conn, SHOP):
        with pytest.raises(ProducerTransactionError) as refusal:
            await producer.submit(conn, VICTIM, ChannelEvent("api", "order-steal", {}))
        assert refusal.value.code == "E-INGEST-001"
        assert (await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {}))).created
    assert await runs_of(db, SHOP) == ["order-1"]
    assert await runs_of(db, VICTIM) == []


@pytest.mark.parametrize(
    "project", ["shop'; SET ROLE awooop_app; --", "shop' ", "shop\\", "", "shop;victim"]
)
async def test_a_project_id_that_is_not_plain_is_refused_before_anything_is_sent(
    pool: Any, project: str
) -> None:
    async with pool.acquire() as conn:
        sent: list[str] = []
        conn.add_query_logger(lambda logged: sent.append(logged.query))
        with pytest.raises(InvalidInputError) as refusal:
            async with producer.transaction(conn, project):
                pass
        assert refusal.value.code == "E-INPUT-001"
        assert sent == [] and not conn.is_in_transaction()


async def test_isolation_levels_and_what_it_refuses(pool: Any, login: Login) -> None:
    async with pool.acquire() as conn:
        for isolation, shown in (
            ("repeatable_read", "repeatable read"),
            ("serializable", "serializable"),
            ("read_committed", "read committed"),
        ):
            async with producer.transaction(conn, SHOP, isolation=isolation):
                assert await conn.fetchval("SHOW transaction_isolation") == shown
                assert await conn.fetchval(TENANT) == SHOP
        with pytest.raises(InvalidInputError):
            producer.transaction(conn, SHOP, isolation="read uncommitted; DROP TABLE orders")
        async with conn.transaction():
            with pytest.raises(ProducerTransactionError) as refusal:
                async with producer.transaction(conn, SHOP):
                    pass
            assert refusal.value.code == "E-INGEST-001"
            assert await conn.fetchval("SELECT 1") == 1  # the caller's transaction goes on
        async with producer.transaction(conn, SHOP):
            # asyncpg's own transaction() refuses a transaction it did not start (a savepoint
            # is a statement here); nothing was sent, the block goes on
            with pytest.raises(asyncpg.InterfaceError, match="manually started"):
                async with conn.transaction():
                    pass
            await conn.execute("SAVEPOINT s; INSERT INTO orders VALUES (7); ROLLBACK TO s")
            await conn.execute("INSERT INTO orders VALUES (8)")
        assert [r["id"] for r in await conn.fetch("SELECT id FROM orders")] == [8]
    with pytest.raises(ProducerConnectionError) as refusal:
        producer.transaction(login.url, SHOP)  # type: ignore[arg-type]
    assert refusal.value.code == "E-INGEST-005"


async def test_a_failed_commit_is_raised_and_the_connection_serves_on(pool: Any) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "CREATE TEMP TABLE deferred (id int UNIQUE DEFERRABLE INITIALLY DEFERRED)"
        )
        with pytest.raises(asyncpg.UniqueViolationError):
            async with producer.transaction(conn, SHOP):
                await conn.execute("INSERT INTO deferred VALUES (1), (1)")  # checked at COMMIT
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT count(*) FROM deferred") == 0


async def test_a_cancelled_statement_in_the_block_raises_as_it_was_and_writes_nothing(
    db: Database, pool: Any
) -> None:
    async def slow_order(conn: Any) -> None:
        async with producer.transaction(conn, SHOP):
            await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {}))
            await asyncio.wait_for(conn.execute("SELECT pg_sleep(5)"), 0.2)

    async with pool.acquire() as conn:
        with pytest.raises(TimeoutError):  # the block's own error, not the ROLLBACK's
            await slow_order(conn)
        assert conn.is_closed() or not conn.is_in_transaction()
    async with pool.acquire() as conn, producer.transaction(conn, SHOP):  # the pool serves on
        await producer.submit(conn, SHOP, ChannelEvent("api", "order-2", {}))
    assert await runs_of(db, SHOP) == ["order-2"]


async def test_a_plain_connection_without_any_setup(db: Database, login: Login) -> None:
    conn = await asyncpg.connect(login.url)
    try:
        async with producer.transaction(conn, SHOP, isolation="read_committed"):
            await conn.execute("INSERT INTO orders VALUES (1)")
            result = await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {}))
        async with producer.transaction(conn, SHOP):
            again = await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {}))
    finally:
        await conn.close()
    assert result.created and not again.created and again.run_id == result.run_id
    assert await runs_of(db, SHOP) == ["order-1"]
