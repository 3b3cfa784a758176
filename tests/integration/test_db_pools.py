"""The role pools release connections without asyncpg's reset query: nothing of a tenant
transaction may outlive it on the pooled connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError
from tests.support.faultproxy import fault_proxy


async def test_a_released_connection_keeps_no_tenant_and_no_transaction(settings: Settings) -> None:
    db = await Database.open(settings.database_url, max_size=1)  # one connection, reused
    try:
        async with db.tenant("a") as conn:
            pid = conn.get_server_pid()
            assert await conn.fetchval("SELECT current_setting('awooop.project_id')") == "a"

        async def fail_mid_transaction() -> None:
            async with db.tenant("b") as conn:
                assert conn.get_server_pid() == pid
                await conn.execute("SELECT 1")
                raise ZeroDivisionError  # leaves mid-transaction: rolled back on release

        with pytest.raises(ZeroDivisionError):
            await fail_mid_transaction()
        async with db.tenant_pool.acquire() as conn:
            assert conn.get_server_pid() == pid
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT current_setting('awooop.project_id', true)") in (
                "",
                None,
            )
            # The same pooled session, still the tenant role and nothing else of earlier users.
            assert await conn.fetchval("SELECT current_user") == "awooop_app"
            assert await conn.fetchval("SELECT count(*) FROM awooop_run_state") == 0
    finally:
        await db.close()


async def test_role_pools_plan_every_statement_for_its_parameters(db: Database) -> None:
    # A cached generic plan made while a table was small keeps scanning it once it is large
    # (awooop/core/pools.py, PLAN_CACHE_MODE); both role pools plan each execution.
    async with db.tenant("a") as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
    async with db.platform() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"


async def test_a_bounded_connection_is_left_alone_after_its_release(database_url: str) -> None:
    """The per-statement bound's timer is re-armed after each answer, possibly after the
    connection went back to the pool: it must not terminate a released connection."""
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    db = await Database.open(database_url, max_size=2)
    db.run_timeout_s = 0.2
    try:
        for _ in range(5):
            assert await db.in_run_statement(lambda c: c.fetchval("SELECT 1")) == 1
        await asyncio.sleep(0.5)  # past every timer
        assert errors == []
        assert await db.in_run_statement(lambda c: c.fetchval("SELECT 2")) == 2
    finally:
        loop.set_exception_handler(None)
        await db.close()


async def test_a_black_holed_statement_fails_within_its_bound_and_the_pool_recovers(
    database_url: str,
) -> None:
    with fault_proxy(database_url) as proxy:
        db = await Database.open(proxy.url(database_url), max_size=2)
        db.run_timeout_s = 0.5
        try:
            assert await db.in_run_statement(lambda c: c.fetchval("SELECT 1")) == 1
            proxy.blackhole()
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailableError, match=r"did not answer within 0\.5 s"):
                await db.in_run_transaction(lambda c: c.fetchval("SELECT 2"))
            assert time.monotonic() - started < 3.0  # the bound, not a hang
            proxy.heal()
            assert await db.in_run_statement(lambda c: c.fetchval("SELECT 3")) == 3
        finally:
            proxy.heal()
            await db.close()


async def test_a_write_on_the_platform_reader_fails_and_writes_are_named(
    settings: Settings,
) -> None:
    """platform() is READ ONLY: a write put there by mistake fails loudly instead of silently
    bypassing row-level security; platform_writes() is the named way to write across projects."""
    db = await Database.open(settings.database_url, max_size=1)
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            async with db.platform() as conn:
                await conn.execute("UPDATE awooop_projects SET disabled = disabled WHERE false")
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await db.in_platform(
                lambda c: c.execute("DELETE FROM awooop_loop_heartbeats WHERE false")
            )
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            async with db.platform(timeout_s=5.0) as conn:  # the bounded path, too
                await conn.execute("UPDATE awooop_projects SET disabled = disabled WHERE false")
        assert await db.in_platform(lambda c: c.fetchval("SELECT 1")) == 1
        async with db.platform_writes() as conn:
            assert await conn.execute("UPDATE awooop_projects SET disabled = disabled WHERE false")
        assert (
            await db.in_platform_writes(
                lambda c: c.execute("DELETE FROM awooop_loop_heartbeats WHERE false")
            )
            == "DELETE 0"
        )
    finally:
        await db.close()
