"""Tenant isolation by row-level security (R-43), on every table that has a project_id column.

The tables are discovered from information_schema at run time, so a table another migration
adds later is covered without touching this file: it must have RLS enabled and forced, only
the ``tenant_isolation`` policy as permissive policy and the restrictive ``tenant_binding``
policy for producer logins (``SELECT awooop_enforce_tenant_isolation('table')``), and it must
isolate as the existing tables do. The credential tables (:data:`PLATFORM_WRITTEN`) are read
by the app role under the same isolation but written by the platform role only: every write
of the app role there is refused, whatever it sets. Producer logins are tested in
``tests/integration/test_tenant_binding.py``.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from awooop.core.db import Database
from awooop.core.pools import SET_TENANT
from tests.support import tenant_rows

A, B = "tenant-a", "tenant-b"
# Tables the app role reads but never writes (migrations/0090_tenant_bindings.sql).
PLATFORM_WRITTEN = frozenset({"awooop_channels", "awooop_api_tokens"})
REFUSED = "refused"
PRODUCER_WRITES = {
    "awooop_run_state": ("producer_writes",),
    "awooop_events": ("producer_writes",),
    "awooop_event_streams": ("producer_inserts", "producer_updates"),
    "awooop_signals": ("producer_writes", "producer_writes_live"),
}

# Partitions of the log are left out: no tenant role has any grant on them (checked below).
TENANT_TABLES = """
SELECT c.table_name
FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema = 'public' AND c.column_name = 'project_id'
  AND t.table_type = 'BASE TABLE'
  AND NOT (SELECT relispartition FROM pg_class WHERE oid = to_regclass(c.table_name))
ORDER BY c.table_name
"""
PARTITION_GRANTS = """
SELECT c.relname, has_table_privilege($1, c.oid, 'SELECT, INSERT, UPDATE, DELETE') AS granted
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'awooop_events'::regclass
"""
# The restrictive policy for producer logins, as pg_policies shows it.
BOUND = "(project_id = ANY (ARRAY( SELECT g.project\n   FROM awooop_my_grants g)))"
RLS_FLAGS = """
SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = $1::regclass
"""
POLICIES = """
SELECT policyname, permissive, cmd, roles, qual, with_check FROM pg_policies
WHERE schemaname = 'public' AND tablename = $1
"""


async def attempt(conn: Any, statement: str, *args: Any) -> str:
    """The statement's status, in a savepoint; REFUSED when Postgres refuses the privilege."""
    try:
        async with conn.transaction():
            status: str = await conn.execute(statement, *args)
    except asyncpg.InsufficientPrivilegeError:
        return REFUSED
    return status


async def tenant_tables(db: Database) -> list[str]:
    async with db.platform() as conn:
        return [str(r["table_name"]) for r in await conn.fetch(TENANT_TABLES)]


async def counts(conn: Any, table: str) -> tuple[int, int, int]:
    """(rows of A, rows of B, rows of anything else) visible on ``conn``."""
    row = await conn.fetchrow(
        f"SELECT count(*) FILTER (WHERE project_id = $1), "
        f"count(*) FILTER (WHERE project_id = $2), "
        f"count(*) FILTER (WHERE project_id IS DISTINCT FROM $1 "
        f"AND project_id IS DISTINCT FROM $2) "
        f"FROM {tenant_rows.quote_ident(table)}",
        A,
        B,
    )
    return int(row[0]), int(row[1]), int(row[2])


@pytest.fixture
async def seeded(db: Database) -> list[str]:
    """Rows of A and B in every tenant table; returns the tables."""
    for project in (A, B):
        await tenant_rows.seed_project(db, project)
    tables = await tenant_tables(db)
    missing: list[str] = []
    for table in tables:
        for project in (A, B):
            async with db.platform_writes() as conn:
                have = await conn.fetchval(
                    f"SELECT count(*) FROM {tenant_rows.quote_ident(table)} WHERE project_id = $1",
                    project,
                )
                if have:
                    continue
                try:
                    async with conn.transaction():
                        await tenant_rows.insert_generic(conn, table, project)
                except asyncpg.PostgresError as exc:
                    missing.append(f"{table}: {exc}")
    assert not missing, (
        "no sample row for these tenant tables; add a builder in tests/support/tenant_rows.py: "
        + "; ".join(missing)
    )
    return tables


async def test_the_known_tenant_tables_are_discovered(db: Database) -> None:
    tables = set(await tenant_tables(db))
    assert {
        "awooop_event_streams",
        "awooop_events",
        "awooop_run_state",
        "awooop_channel_event_dedupe",
        "awooop_contract_revisions",
        "awooop_active_revisions",
        "awooop_contract_outbox",
        "awooop_projects",
        "awooop_loop_heartbeats",
    } <= tables


async def test_no_tenant_role_can_reach_a_partition_of_the_log_directly(db: Database) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(
            "SELECT awooop_ensure_log_partitions(now() - interval '20 days', now(), 7)"
        )
        for role in ("awooop_app", "awooop_producer", "awooop_platform"):
            rows = await conn.fetch(PARTITION_GRANTS, role)
            assert len(rows) >= 3
            assert [r["relname"] for r in rows if r["granted"]] == [], role
        for r in await conn.fetch(PARTITION_GRANTS, "awooop_app"):
            assert tuple(await conn.fetchrow(RLS_FLAGS, r["relname"])) == (True, True)


async def test_every_tenant_table_has_forced_rls_and_only_the_isolation_policy(
    db: Database,
) -> None:
    problems: list[str] = []
    reference: tuple[str, str] | None = None
    async with db.platform_writes() as conn:
        for table in await tenant_tables(db):
            enabled, forced = await conn.fetchrow(RLS_FLAGS, table)
            if not enabled or not forced:
                problems.append(f"{table}: RLS enabled={enabled} forced={forced}")
            policies = await conn.fetch(POLICIES, table)
            permissive = [p for p in policies if p["permissive"] == "PERMISSIVE"]
            if [p["policyname"] for p in permissive] != ["tenant_isolation"]:
                names = [p["policyname"] for p in permissive]
                problems.append(f"{table}: permissive policies {names}, want [tenant_isolation]")
                continue
            policy = permissive[0]
            if policy["cmd"] != "ALL":
                problems.append(f"{table}: tenant_isolation covers {policy['cmd']}, not ALL")
            shape = (policy["qual"], policy["with_check"])
            reference = reference or shape
            if shape != reference:
                problems.append(f"{table}: policy {shape} differs from {reference}")
            restrictive = [
                (p["policyname"], p["cmd"], p["roles"], p["qual"], p["with_check"])
                for p in policies
                if p["permissive"] == "RESTRICTIVE"
            ]
            binding = [("tenant_binding", "ALL", ["awooop_producer"], BOUND, BOUND)]
            # Tables the producer library writes also limit what a producer writes there
            # (tests/integration/test_tenant_binding.py).
            restrictive = [p for p in restrictive if p[0] not in PRODUCER_WRITES.get(table, ())]
            if restrictive != binding:
                problems.append(f"{table}: restrictive policies {restrictive}, want {binding}")
    assert not problems, (
        "tenant tables must be isolated: SELECT awooop_enforce_tenant_isolation('<table>'); "
        + "; ".join(problems)
    )
    assert reference is not None and "NULLIF" in reference[0]


async def test_a_tenant_cannot_read_update_or_delete_another_tenants_rows(
    db: Database, seeded: list[str]
) -> None:
    problems: list[str] = []
    for table in seeded:
        t = tenant_rows.quote_ident(table)
        async with db.platform_writes() as conn:
            before = await counts(conn, table)
            b_row = await tenant_rows.one_row(conn, table, B)
            columns = await tenant_rows.insertable_columns(conn, table)
        async with db.tenant(A) as conn:
            seen = await counts(conn, table)
            if seen[0] < 1 or seen[1:] != (0, 0):
                problems.append(f"{table}: A sees (A, B, other) = {seen}")
            platform_written = table in PLATFORM_WRITTEN
            updated = await attempt(
                conn, f"UPDATE {t} SET project_id = project_id WHERE project_id = $1", B
            )
            if updated != (REFUSED if platform_written else "UPDATE 0"):
                problems.append(f"{table}: A updated B's rows ({updated})")
            deleted = await attempt(conn, f"DELETE FROM {t} WHERE project_id = $1", B)
            if deleted != (REFUSED if platform_written else "DELETE 0"):
                problems.append(f"{table}: A deleted B's rows ({deleted})")
            everything = await attempt(conn, f"UPDATE {t} SET project_id = project_id")
            if everything != (REFUSED if platform_written else f"UPDATE {seen[0]}"):
                problems.append(f"{table}: an unfiltered UPDATE touched {everything}")
            try:
                async with conn.transaction():
                    await conn.execute(
                        f"UPDATE {t} SET project_id = $1 WHERE project_id = $2", B, A
                    )
                problems.append(f"{table}: A moved its row into B")
            except asyncpg.InsufficientPrivilegeError:
                pass
            try:
                async with conn.transaction():
                    await tenant_rows.insert_copy(conn, table, b_row, columns)
                problems.append(f"{table}: A inserted a row of B")
            except asyncpg.InsufficientPrivilegeError:
                pass
            try:
                async with conn.transaction():
                    await conn.execute(f"ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY")
                problems.append(f"{table}: the app role could switch RLS off")
            except asyncpg.InsufficientPrivilegeError:
                pass
        async with db.platform_writes() as conn:
            after = await counts(conn, table)
        if after != before:
            problems.append(f"{table}: rows changed under A: {before} -> {after}")
    assert not problems, "; ".join(problems)


async def test_without_the_setting_a_session_sees_and_writes_no_tenant_rows(
    db: Database, seeded: list[str]
) -> None:
    problems: list[str] = []
    async with db.platform_writes() as conn:
        samples = {
            table: (
                await tenant_rows.one_row(conn, table, A),
                await tenant_rows.insertable_columns(conn, table),
            )
            for table in seeded
        }
    async with db.tenant_pool.acquire() as conn:
        # A setting made in an earlier transaction of this pooled connection reads back as ''
        # afterwards (not NULL): that is the case the policy must also close.
        async with conn.transaction():
            await conn.execute(SET_TENANT, A)
            assert await counts(conn, seeded[0]) != (0, 0, 0)
        assert await conn.fetchval("SELECT current_setting('awooop.project_id', true)") == ""
        for table in seeded:
            t = tenant_rows.quote_ident(table)
            seen = await counts(conn, table)
            if seen != (0, 0, 0):
                problems.append(f"{table}: without a project a session sees {seen}")
            for statement in (f"UPDATE {t} SET project_id = project_id", f"DELETE FROM {t}"):
                status = await attempt(conn, statement)
                if not status.endswith(" 0") and not (
                    status == REFUSED and table in PLATFORM_WRITTEN
                ):
                    problems.append(f"{table}: without a project {statement!r} -> {status}")
            row, columns = samples[table]
            for project in ("", A):
                try:
                    async with conn.transaction():
                        await tenant_rows.insert_copy(
                            conn, table, {**row, "project_id": project}, columns
                        )
                    problems.append(f"{table}: without a project, inserted project {project!r}")
                except asyncpg.InsufficientPrivilegeError:
                    pass
    async with db.tenant(A) as conn:
        for table in seeded:
            if (await counts(conn, table))[0] < 1:
                problems.append(f"{table}: A's rows are gone")
    assert not problems, "; ".join(problems)


async def test_a_fresh_session_without_the_setting_sees_nothing(
    database_url: str, seeded: list[str]
) -> None:
    conn = await asyncpg.connect(database_url, server_settings={"role": "awooop_app"})
    try:
        assert await conn.fetchval("SELECT current_setting('awooop.project_id', true)") is None
        for table in seeded:
            assert await counts(conn, table) == (0, 0, 0), table
    finally:
        await conn.close()


async def test_the_platform_role_sees_every_project(db: Database, seeded: list[str]) -> None:
    async with db.platform() as conn:
        for table in seeded:
            a, b, _ = await counts(conn, table)
            assert a >= 1 and b >= 1, table
