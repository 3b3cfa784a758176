"""Migrations: idempotent, checksummed, safe with concurrent migrators, clear when DB is down."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest

from awooop.core.errors import MigrationChecksumError
from awooop.core.migrate import MIGRATIONS_DIR, discover, migrate
from awooop.core.migration_checksums import raw_checksum
from tests.support import databases


@pytest.fixture
async def fresh_url(pg_server_url: str) -> object:
    name = f"awooop_mig_{uuid.uuid4().hex[:10]}"
    yield databases.with_database(pg_server_url, name)
    await databases.drop_database(pg_server_url, name)


async def schema_of(url: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2"
        )
    finally:
        await conn.close()
    return [(r[0], r[1]) for r in rows]


async def test_migrations_apply_once_and_then_change_nothing(fresh_url: str) -> None:
    first = await migrate(fresh_url)
    assert first == [m.name for m in discover()]
    before = await schema_of(fresh_url)
    assert await migrate(fresh_url) == []
    assert await schema_of(fresh_url) == before


async def test_a_changed_applied_file_is_refused(fresh_url: str, tmp_path: Path) -> None:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy)
    await migrate(fresh_url, copy)
    target = sorted(copy.glob("*.sql"))[1]
    target.write_text(target.read_text() + "\nCREATE TABLE edited (a int);\n")
    with pytest.raises(MigrationChecksumError) as info:
        await migrate(fresh_url, copy)
    assert target.name in info.value.message and "awooop doctor" in info.value.message
    conn = await asyncpg.connect(fresh_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('edited')") is None
    finally:
        await conn.close()


async def test_comments_and_layout_of_an_applied_file_may_change(
    fresh_url: str, tmp_path: Path
) -> None:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy)
    await migrate(fresh_url, copy)
    target = sorted(copy.glob("*.sql"))[1]
    target.write_text("-- reworded\n" + target.read_text().replace("\n", "\n  ") + "\n")
    assert await migrate(fresh_url, copy) == []


async def test_rows_keep_the_raw_checksum_every_release_compares(fresh_url: str) -> None:
    """An earlier release's `awooop migrate` and doctor compare the sha256 of the file's text:
    a database this release migrated stays one they accept (the way back to them)."""
    await migrate(fresh_url)
    conn = await asyncpg.connect(fresh_url)
    try:
        rows = await conn.fetch("SELECT name, checksum, normalised FROM awooop_schema_migrations")
    finally:
        await conn.close()
    recorded = {r["name"]: (r["checksum"], r["normalised"]) for r in rows}
    assert recorded == {m.name: (raw_checksum(m.sql), m.checksum) for m in discover()}


async def test_a_table_an_older_release_made_gets_the_normalised_column(
    fresh_url: str, tmp_path: Path
) -> None:
    """Releases before normalised checksums made the table without the column."""
    older = tmp_path / "older"
    shutil.copytree(MIGRATIONS_DIR, older)
    newest = sorted(older.glob("*.sql"))[-1]
    newest.unlink()
    await migrate(fresh_url, older)
    conn = await asyncpg.connect(fresh_url)
    try:
        await conn.execute("ALTER TABLE awooop_schema_migrations DROP COLUMN normalised")
        assert await migrate(fresh_url, older) == []  # nothing pending: no DDL, still accepted
        assert await migrate(fresh_url) == [newest.name]
        normalised = await conn.fetchval(
            "SELECT normalised FROM awooop_schema_migrations WHERE name = $1", newest.name
        )
    finally:
        await conn.close()
    assert normalised == discover()[-1].checksum


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "awooop.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


async def test_two_concurrent_migrators_end_with_one_schema(fresh_url: str) -> None:
    env = {"AWOOOP_DATABASE_URL": fresh_url}
    results = await asyncio.gather(
        *(asyncio.to_thread(run_cli, "migrate", env=env) for _ in range(2))
    )
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    applied = sorted(r.stdout for r in results)
    assert applied[0].startswith("applied 0 migration(s)")
    assert applied[1].startswith(f"applied {len(discover())} migration(s)")
    conn = await asyncpg.connect(fresh_url)
    try:
        names = await conn.fetch("SELECT name FROM awooop_schema_migrations ORDER BY name")
    finally:
        await conn.close()
    assert [r["name"] for r in names] == [m.name for m in discover()]


def test_migrate_against_an_unreachable_database_fails_in_one_line() -> None:
    result = run_cli("migrate", env={"AWOOOP_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error E-DB-001:"), result.stderr
    assert "Traceback" not in result.stderr


def test_bad_configuration_fails_at_start_with_the_variable_name() -> None:
    result = run_cli("migrate", env={"AWOOOP_LEASE_TTL_S": "-1"})
    assert result.returncode == 1
    assert "AWOOOP_LEASE_TTL_S" in result.stderr and "Traceback" not in result.stderr
