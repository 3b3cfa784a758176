"""Schema migrations: numbered plain-SQL files in ``migrations/``, applied in order.

- the target database is created when it is missing (a concurrent creator is fine);
- a session advisory lock makes concurrent migrators take turns: the second one finds
  everything applied and does nothing;
- each file runs in its own transaction together with its record in
  ``awooop_schema_migrations`` (name, raw and normalised checksums, applied_at), waiting at
  most a fraction of a second for each lock and tried again whole when it times out or meets
  a deadlock (so the migrator, not a running process, gives way in a lock cycle); an online
  migration (marked ``-- awooop: online`` at its top) runs as short steps and is then
  recorded (awooop/core/online_plan.py);
- an applied file whose recorded checksum is not that of a released version of it
  (awooop/core/migration_checksums.py) stops everything with E-MIGRATE-001;
- nothing pending means no DDL at all, so a role without schema rights (what the runtime's
  processes log in as) can run it as a check; with something pending such a role gets
  E-MIGRATE-002 and nothing is written;
- each file is an expand or a contract step (awooop/core/migration_phases.py): a contract
  step, and every file after it, is held back while a live process (awooop/core/processes.py)
  runs a release it would stop, or when only the expand phase is asked for.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from awooop.core.db import Connection
from awooop.core.errors import (
    ConfigError,
    MigrationChecksumError,
    MigrationPrivilegeError,
    MigrationsNotFoundError,
)
from awooop.core.logs import get_logger
from awooop.core.migration_checksums import (
    Recorded,
    accepted_by_file,
    load_released,
    normalised_checksum,
    raw_checksum,
    recorded_is_released,
    unreleased_message,
)
from awooop.core.migration_phases import Plan, Step, plan, step_of
from awooop.core.online_migrations import apply_online, apply_whole, forget_steps
from awooop.core.online_plan import is_online
from awooop.core.pools import connect
from awooop.core.processes import live_processes
from awooop.core.retries import CONNECTION_ERRORS

log = get_logger(__name__)

# The package's migrations folder: in a checkout a link to the repository's migrations/ (their
# one source), in an installed wheel package data; resolved, a checkout's is migrations/ itself.
MIGRATIONS_DIR = (Path(__file__).resolve().parents[1] / "migrations").resolve()
FILE_PATTERN = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
LOCK_KEY = 0x61776F6F6F70  # "awooop": one key for every migrator of this database
LOCK_POLL_S = 0.2

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS awooop_schema_migrations (
    name        text PRIMARY KEY,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    normalised  text
)
"""
# Tables created by releases before normalised checksums get the column before the first
# migration this release applies (never on a run with nothing pending: no DDL then).
NORMALISED_EXISTS = """
SELECT EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'awooop_schema_migrations'::regclass
                 AND attname = 'normalised' AND NOT attisdropped)
"""
ADD_NORMALISED = "ALTER TABLE awooop_schema_migrations ADD COLUMN normalised text"
TABLE_EXISTS = "SELECT to_regclass('awooop_schema_migrations') IS NOT NULL"
# to_jsonb: reads the column where it exists and NULL where an earlier release made the table.
SELECT_APPLIED = """
SELECT m.name, m.checksum, to_jsonb(m) ->> 'normalised' AS normalised
FROM awooop_schema_migrations m
"""
INSERT_APPLIED = """
INSERT INTO awooop_schema_migrations (name, checksum, normalised) VALUES ($1, $2, $3)
"""
DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = $1"


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """The file's statements: comments and layout do not count."""
        return normalised_checksum(self.sql)


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    if not directory.is_dir():
        raise MigrationsNotFoundError(
            f"the migrations folder {directory} is missing: this installation of awooop is"
            " incomplete; install it again from its wheel, or run from a complete checkout"
        )
    files = sorted(p for p in directory.iterdir() if p.suffix == ".sql")
    for path in files:
        if not FILE_PATTERN.match(path.name):
            raise ConfigError(f"migration file {path.name} is not named NNNN_description.sql")
    return [Migration(p.name, p.read_text()) for p in files]


async def read_applied(conn: Connection) -> dict[str, Recorded]:
    rows = await conn.fetch(SELECT_APPLIED)
    return {r["name"]: Recorded(r["checksum"], r["normalised"]) for r in rows}


def unreleased(
    migrations: list[Migration], applied: Mapping[str, Recorded], directory: Path = MIGRATIONS_DIR
) -> list[str]:
    """The applied files whose recorded checksum is no released version of the file."""
    accepted = accepted_by_file(load_released(directory))
    return [
        m.name
        for m in migrations
        if m.name in applied and not recorded_is_released(m.name, m.sql, applied[m.name], accepted)
    ]


def schema_fingerprint(directory: Path = MIGRATIONS_DIR) -> str:
    """A short hash of every migration: names a template database built from them."""
    # The record's shape too: a template migrated by a migrator that recorded otherwise is
    # another schema version for the tests that copy it.
    digest = hashlib.sha256(INSERT_APPLIED.encode())
    for m in discover(directory):
        digest.update(m.name.encode() + b"\0" + m.checksum.encode())
    return digest.hexdigest()[:12]


async def ensure_database(url: str) -> None:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if not DATABASE_NAME.match(name):
        raise ConfigError(f"database name {name!r} must match {DATABASE_NAME.pattern}")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    conn = await connect(admin_url)
    try:
        if await conn.fetchval(DATABASE_EXISTS, name):
            return
        try:
            # Identifiers cannot be parameters; the name was checked against DATABASE_NAME.
            await conn.execute(f'CREATE DATABASE "{name}"')
            log.info("database_created", database=name)
        except (asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
            pass  # a concurrent migrator created it first
        except asyncpg.InsufficientPrivilegeError as exc:
            raise MigrationPrivilegeError(
                f"database {name} does not exist and this role may not create it ({exc})"
            ) from exc
    finally:
        await conn.close()


@dataclass(frozen=True)
class Outcome:
    """What one ``awooop migrate`` did: the files it applied, and the plan it followed (the
    steps it held back and the live processes they would have stopped)."""

    applied: list[str]
    plan: Plan


async def migrate(url: str, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply pending migrations (both phases, holding back a contract step that would stop a
    live process); return the names applied by this call."""
    return (await migrate_in_phases(url, directory)).applied


async def migrate_in_phases(
    url: str,
    directory: Path = MIGRATIONS_DIR,
    *,
    expand_only: bool = False,
) -> Outcome:
    """Apply what :func:`plan_pending` allows now, under the migrators' lock."""
    migrations = discover(directory)
    steps = {m.name: step_of(m.name, m.sql) for m in migrations}  # E-MIGRATE-004 before DDL
    await ensure_database(url)
    conn = await connect(url)
    try:
        # Polled, not waited for inside a statement: a migrator waiting in one holds a snapshot,
        # which an online migration's CREATE INDEX CONCURRENTLY would wait for in turn.
        while True:
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY):
                break
            await asyncio.sleep(LOCK_POLL_S)
        try:
            if not await conn.fetchval(TABLE_EXISTS):
                await conn.execute(CREATE_TABLE)
            pending = await _pending(conn, migrations, directory)
            chosen = plan(
                [steps[m.name] for m in pending],
                await live_processes(conn),
                expand_only=expand_only,
            )
            allowed = {step.name for step in chosen.apply}
            applied = await _apply(conn, [m for m in pending if m.name in allowed])
            return Outcome(applied, chosen)
        except asyncpg.InsufficientPrivilegeError as exc:
            raise MigrationPrivilegeError(
                f"this role may not change the schema ({exc}): run `awooop migrate` as the "
                "tables' owner or a superuser"
            ) from exc
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    finally:
        await conn.close()


async def plan_pending(url: str, directory: Path = MIGRATIONS_DIR) -> Plan:
    """What ``awooop migrate`` would apply now, and what it would hold back, without writing
    (``awooop migrate --check``). A database that does not exist yet has everything pending."""
    migrations = discover(directory)
    steps = {m.name: step_of(m.name, m.sql) for m in migrations}
    try:
        conn = await connect(url)
    except asyncpg.InvalidCatalogNameError:
        return plan(list(steps.values()), [], expand_only=False)
    try:
        if await conn.fetchval(TABLE_EXISTS):
            pending = await _pending(conn, migrations, directory)
        else:
            pending = migrations
        live = await live_processes(conn)
        return plan([steps[m.name] for m in pending], live, expand_only=False)
    finally:
        await conn.close()


async def _pending(
    conn: Connection, migrations: list[Migration], directory: Path
) -> list[Migration]:
    """The files not applied yet; E-MIGRATE-001 when an applied one is no released version."""
    applied = await read_applied(conn)
    changed = unreleased(migrations, applied, directory)
    if changed:
        raise MigrationChecksumError(unreleased_message(changed, applied))
    return [m for m in migrations if m.name not in applied]


async def _apply(conn: Connection, pending: list[Migration]) -> list[str]:
    done: list[str] = []
    for m in pending:
        if not done and not await conn.fetchval(NORMALISED_EXISTS):
            await conn.execute(ADD_NORMALISED)
        record = (INSERT_APPLIED, m.name, raw_checksum(m.sql), m.checksum)
        if is_online(m.sql):  # short steps of their own, before the record
            await apply_online(conn, m.name, m.sql)
            async with conn.transaction():
                await forget_steps(conn, m.name)
                await conn.execute(*record)
        else:
            await apply_whole(conn, m.name, m.sql, record)
        log.info("migration_applied", migration=m.name)
        done.append(m.name)
    return done


__all__ = [
    "CONNECTION_ERRORS",
    "Migration",
    "Outcome",
    "Step",
    "discover",
    "migrate",
    "migrate_in_phases",
    "plan_pending",
    "read_applied",
    "schema_fingerprint",
    "unreleased",
]
