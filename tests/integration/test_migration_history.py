"""Every database a release on main created upgrades to the current schema.

For each commit on main's first-parent history that changed migrations/, a database is built
from nothing with that commit's files exactly as that release's `awooop migrate` built it (each
file in its own transaction, the raw sha256 of its text recorded; a release that already
recorded normalised checksums with the current migrator), then the current `migrate`
runs, and the schema must equal that of a database migrated fresh: every table, column, index,
constraint, policy, function, trigger and grant, as `pg_dump --schema-only` prints them.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from awooop.core.migrate import discover, ensure_database, migrate
from awooop.core.migration_checksums import raw_checksum
from awooop.core.schema_check import read_schema_state
from tests.support import databases
from tests.support.migration_history import (
    main_ref,
    materialise,
    records_normalised,
    release_commits,
)

# Partitions are named and bounded by the week they were created in: a build that crosses
# midnight must not count as a different schema.
PARTITION_NAME = re.compile(r"_p\d{8}\b")
TIMESTAMP = re.compile(r"'\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\+00'")
PARALLEL_BUILDS = 2


# The table and the record as every release before normalised checksums made them.
RELEASED_TABLE = """
CREATE TABLE IF NOT EXISTS awooop_schema_migrations (
    name        text PRIMARY KEY,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""
RELEASED_INSERT = "INSERT INTO awooop_schema_migrations (name, checksum) VALUES ($1, $2)"


async def migrate_as_released(url: str, folder: Path) -> None:
    """What `awooop migrate` of a release before normalised checksums did with its files."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(RELEASED_TABLE)
        for m in discover(folder):
            async with conn.transaction():
                await conn.execute(m.sql)
                await conn.execute(RELEASED_INSERT, m.name, raw_checksum(m.sql))
    finally:
        await conn.close()


def schema_dump(url: str) -> frozenset[str]:
    """The statements of `pg_dump --schema-only`, partition dates masked."""
    parts = urlsplit(url)
    dump = subprocess.run(
        [
            "pg_dump",
            "--schema-only",
            "--no-owner",
            "-h",
            parts.hostname or "127.0.0.1",
            "-p",
            str(parts.port or 5432),
            "-U",
            parts.username or "postgres",
            parts.path.lstrip("/"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    # \restrict and \unrestrict carry a random key per dump; they are no part of the schema.
    lines = [line for line in dump.splitlines() if line and not line.startswith(("--", "\\"))]
    text = TIMESTAMP.sub("'<time>'", PARTITION_NAME.sub("_p<date>", "\n".join(lines)))
    return frozenset(statement.strip() for statement in text.split(";\n"))


@pytest.fixture
async def scratch_databases(pg_server_url: str) -> AsyncIterator[Callable[[], str]]:
    names: list[str] = []

    def new_url() -> str:
        names.append(f"awooop_hist_{uuid.uuid4().hex[:10]}")
        return databases.with_database(pg_server_url, names[-1])

    yield new_url
    for name in names:
        await databases.drop_database(pg_server_url, name)


def folder_signature(folder: Path) -> tuple[tuple[str, str], ...]:
    return tuple((p.name, p.read_text()) for p in sorted(folder.iterdir()))


@pytest.mark.long(35)
async def test_every_released_schema_upgrades_to_the_current_one(
    scratch_databases: Callable[[], str], tmp_path: Path
) -> None:
    ref = main_ref()
    commits = release_commits(ref)
    assert commits, f"no commit on {ref} changed migrations/"
    releases: dict[tuple[tuple[str, str], ...], str] = {}
    for commit in commits:
        folder = materialise(commit, tmp_path / commit[:12])
        releases.setdefault(folder_signature(folder), commit)

    fresh = scratch_databases()
    await migrate(fresh)
    expected = await asyncio.to_thread(schema_dump, fresh)

    slots = asyncio.Semaphore(PARALLEL_BUILDS)

    async def upgraded(commit: str) -> tuple[str, frozenset[str]]:
        async with slots:
            url = scratch_databases()
            await ensure_database(url)
            folder = tmp_path / commit[:12]
            if records_normalised(commit):
                await migrate(url, folder)  # that release's migrator records as this one does
            else:
                await migrate_as_released(url, folder)
            await migrate(url)
            conn = await asyncpg.connect(url)
            try:
                state = await read_schema_state(conn)  # what every process checks at start
            finally:
                await conn.close()
            assert state.runnable and not state.newer, (commit, state)
            return commit, await asyncio.to_thread(schema_dump, url)

    results = await asyncio.gather(*(upgraded(c) for c in releases.values()))
    differences = [
        f"{commit[:12]}: {sign} {statement.splitlines()[0][:160]}"
        for commit, schema in results
        for sign, statements in (("missing", expected - schema), ("extra", schema - expected))
        for statement in sorted(statements)
    ]
    assert not differences, "\n".join(differences)
    assert len(results) == len(releases) > 1
