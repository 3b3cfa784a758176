"""The role pools release connections without asyncpg's reset query: nothing of a tenant
transaction may outlive it on the pooled connection."""

from __future__ import annotations

import pytest

from awooop.config import Settings
from awooop.db import Database


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
    # (awooop/db.py, PLAN_CACHE_MODE); both role pools plan each execution.
    async with db.tenant("a") as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
    async with db.platform() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
