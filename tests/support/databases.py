"""A migrated template database per schema version, and a fresh copy of it per test."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from awooop.core.migrate import migrate, schema_fingerprint

TEMPLATE_LOCK = 0x74706C  # serialises template builds of concurrent test sessions
# Every database made from the template records its objects' owners in pg_shdepend, a catalog
# shared by the whole server, and dropping it leaves those rows dead: about 180 a database, a
# thousand databases a suite. Where autovacuum is off (this machine's Postgres has it so)
# nothing reclaims them: a day of suite runs left 1.15 million dead rows (104 MB). So each test
# process vacuums the shared catalogs that test databases and logins churn when it starts
# (SKIP_LOCKED: one process at a time is enough): what a suite leaves, the next one reclaims.
# (At the 60,000-70,000 dead rows one suite leaves, CREATE DATABASE was no faster vacuumed.)
SHARED_CATALOGS = ("pg_shdepend", "pg_database", "pg_authid", "pg_auth_members")
EXTEND_PARTITIONS = (
    "SELECT awooop_ensure_log_partitions(now() - interval '1 day', now() + interval '14 days', 7)",
    "SELECT awooop_ensure_dedupe_partitions(now(), now() + interval '14 days')",
)


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def ensure_template(server_url: str) -> str:
    """Build (once per schema fingerprint) a migrated template; return its name."""
    name = f"awooop_tpl_{schema_fingerprint()}"
    admin = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await admin.execute("SELECT pg_advisory_lock($1)", TEMPLATE_LOCK)
        try:
            await vacuum_shared_catalogs(admin)
            if await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
                await extend_log_partitions(with_database(server_url, name))
                return name
            # Build under a scratch name and rename, so a half-built template never exists.
            scratch = f"{name}_build_{uuid.uuid4().hex[:8]}"
            await migrate(with_database(server_url, scratch))
            await admin.execute(f'ALTER DATABASE "{scratch}" RENAME TO "{name}"')
            return name
        finally:
            await admin.execute("SELECT pg_advisory_unlock($1)", TEMPLATE_LOCK)
    finally:
        await admin.close()


async def extend_log_partitions(url: str) -> None:
    """A template built on an earlier day has no partition of the log (or dedupe window) for
    today: extend them as the log_partitions and dedupe_expiry loops would."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET client_min_messages = warning")
        for statement in EXTEND_PARTITIONS:
            await conn.execute(statement)
    finally:
        await conn.close()


async def vacuum_shared_catalogs(admin: asyncpg.Connection) -> None:
    """VACUUM the shared catalogs test databases churn; a login that may not (not a superuser)
    skips it: the suite is slower on a bloated server, not wrong."""
    with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
        await admin.execute(f"VACUUM (SKIP_LOCKED) {', '.join(SHARED_CATALOGS)}")


async def create_test_database(server_url: str, template: str) -> str:
    name = f"awooop_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        for attempt in range(20):
            try:
                await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                break
            except asyncpg.ObjectInUseError:
                # Another session is briefly connected to the template; try again.
                await asyncio.sleep(0.05 * (attempt + 1))
        else:
            raise RuntimeError(f"template {template} stayed busy")
    finally:
        await admin.close()
    return name


async def drop_database(server_url: str, name: str) -> None:
    admin = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
