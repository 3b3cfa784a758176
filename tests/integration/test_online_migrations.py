"""Online migrations on real Postgres: they wait out locks without blocking the log, survive a
killed migrator, and are recorded only once complete."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from awooop.core.errors import OnlineMigrationBlockedError
from awooop.core.migrate import MIGRATIONS_DIR, migrate
from awooop.core.migration_checksums import normalised_checksum, raw_checksum
from awooop.core.online_migrations import apply_online
from awooop.core.online_plan import Policy
from awooop.eventlog import eventlog, queries
from tests.support.logcapture import capture_context_logs
from tests.support.waiting import eventually

INDEX = "awooop_events_test_type_idx"
INDEX_FILE = "9001_online_test_index.sql"
INDEX_SQL = f"""-- awooop: online
-- phase: expand
-- A test index on the log, built online.
CREATE INDEX CONCURRENTLY {INDEX} ON awooop_events (event_type, position);
"""
BATCH_FILE = "9002_online_test_backfill.sql"
BATCH_SQL = """-- awooop: online
-- phase: expand
UPDATE online_probe SET note = 'done'
WHERE id IN (SELECT id FROM online_probe WHERE note IS NULL ORDER BY id LIMIT $1);
"""
VALIDATE_FILE = "0126_validate_log_stream_names.sql"
CONSTRAINT = "awooop_events_stream_of_project"
# Run streams of this week's and next week's partitions, each with its head.
FILL = """
WITH heads AS (
    INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
    SELECT 'run-' || md5('t' || n)::uuid, 'p1', 1, pg_current_xact_id()
    FROM generate_series(1, $1) AS n
    RETURNING stream_id
)
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data,
                           recorded_at)
SELECT gen_random_uuid(), stream_id, 1, 'p1', 'RunCreated', '{}',
       now() + CASE WHEN random() < 0.5 THEN interval '0' ELSE interval '8 days' END
FROM heads
"""
CHILD_INDEXES = """
SELECT c.relname::text AS name, x.indisvalid AS valid,
       EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid) AS attached
FROM pg_index x
JOIN pg_class c ON c.oid = x.indexrelid
JOIN pg_inherits p ON p.inhrelid = x.indrelid AND p.inhparent = 'awooop_events'::regclass
WHERE c.relname LIKE $1 || '%'
"""
PARTITIONS = "SELECT count(*) FROM pg_inherits WHERE inhparent = 'awooop_events'::regclass"
RECORDED = "SELECT checksum, normalised FROM awooop_schema_migrations WHERE name = $1"
STEPS_LEFT = "SELECT count(*) FROM awooop_online_migration_steps WHERE migration = $1"
APPEND = queries.load("append")
BUILDING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'CREATE INDEX CONCURRENTLY%'
  AND pid <> pg_backend_pid()
"""


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    await conn.execute(FILL, 4_000)
    await conn.execute("ANALYZE awooop_events")
    yield conn
    await conn.close()


def migrations_with(tmp_path: Path, name: str, sql: str) -> Path:
    directory = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, directory)
    (directory / name).write_text(sql)
    return directory


async def assert_recorded_complete(conn: asyncpg.Connection, name: str, sql: str) -> None:
    row = await conn.fetchrow(RECORDED, name)
    assert row is not None and tuple(row) == (raw_checksum(sql), normalised_checksum(sql))
    assert await conn.fetchval(STEPS_LEFT, name) == 0


async def assert_index_complete(conn: asyncpg.Connection) -> None:
    assert await conn.fetchval(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", INDEX
    )
    children = await conn.fetch(CHILD_INDEXES, INDEX)
    assert len(children) == await conn.fetchval(PARTITIONS)
    assert all(c["valid"] and c["attached"] for c in children), children


class LogLoad:
    """A writer appending new run streams and a reader reading the log, each op timed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = asyncio.Event()
        self.latencies: dict[str, list[float]] = {"write": [], "read": []}

    async def run(self) -> None:
        await asyncio.gather(self._loop("write"), self._loop("read"))

    async def _loop(self, kind: str) -> None:
        conn = await asyncpg.connect(self.url)
        cursor = eventlog.Cursor()
        try:
            while not self.stop.is_set():
                began = time.monotonic()
                if kind == "write":
                    stream = f"run-{uuid.uuid4()}"
                    args = [[uuid.uuid4()], ["RunCreated"], ["{}"], ["{}"]]
                    assert await conn.fetch(APPEND, stream, "p1", 0, *args)
                else:
                    await eventlog.read_stream(conn, f"run-{uuid.uuid4()}")
                    batch = await eventlog.read_forward(conn, cursor, 100)
                    cursor = eventlog.advance(cursor, batch)
                self.latencies[kind].append(time.monotonic() - began)
                await asyncio.sleep(0.02)
        finally:
            await conn.close()


@pytest.mark.long
async def test_an_online_index_waits_out_a_long_writer_and_never_blocks_the_log(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    """A transaction that keeps writing to the log holds the lock the parent's index needs:
    the old way (CREATE INDEX in the migration's transaction) would queue every writer behind
    it for as long as it lasts. Online, the request gives up after lock_timeout (1 s), is
    retried, and goes through once the holder is gone; writers and readers wait at most about
    one lock_timeout at a time."""
    directory = migrations_with(tmp_path, INDEX_FILE, INDEX_SQL)
    holder = await asyncpg.connect(database_url)
    load = LogLoad(database_url)
    loading = asyncio.create_task(load.run())
    with capture_context_logs() as logs:
        try:
            await holder.execute("BEGIN")
            await holder.fetch(
                APPEND, f"run-{uuid.uuid4()}", "p1", 0, [uuid.uuid4()], ["RunCreated"],
                ["{}"], ["{}"],
            )  # fmt: skip
            migrating = asyncio.create_task(migrate(database_url, directory))
            held_since = time.monotonic()
            await eventually(
                lambda: sum(1 for e in logs if e["event"] == "online_migration_retry") >= 6,
                what="six lock_timeout retries while the writer holds its lock",
                timeout_s=120,
            )
            held_s = time.monotonic() - held_since
            assert not migrating.done()
            await holder.execute("COMMIT")
            assert await asyncio.wait_for(migrating, 120) == [INDEX_FILE]
        finally:
            load.stop.set()
            await loading
            await holder.close()
    retries = [e for e in logs if e["event"] == "online_migration_retry"]
    assert {e["error"] for e in retries} == {"LockNotAvailableError"}
    assert all(e["waited_s"] < 5 for e in retries)
    await assert_index_complete(db)
    await assert_recorded_complete(db, INDEX_FILE, INDEX_SQL)
    # The bound is lock_timeout (1 s) and the load's own latency; 5 s leaves room for a loaded
    # machine while staying under the holder's time (the old way's block).
    assert held_s > 5
    assert max(load.latencies["write"]) < 5 and max(load.latencies["read"]) < 5
    assert len(load.latencies["write"]) > 10
    assert any(e["event"] == "online_migration_progress" for e in logs)


async def test_a_killed_migrator_leaves_an_invalid_index_that_the_next_run_replaces(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    directory = migrations_with(tmp_path, INDEX_FILE, INDEX_SQL)
    # An open snapshot: a CONCURRENTLY build waits for it after its index exists, invalid.
    snapshot = await asyncpg.connect(database_url)
    await snapshot.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    await snapshot.fetchval("SELECT count(*) FROM awooop_run_state")
    script = (
        "import asyncio, sys; from pathlib import Path; from awooop.core.migrate import migrate; "
        "asyncio.run(migrate(sys.argv[1], Path(sys.argv[2])))"
    )
    proc = subprocess.Popen(  # noqa: ASYNC220 - killed below, never waited on while running
        [sys.executable, "-c", script, database_url, str(directory)],
        env={**os.environ, "PYTHONPATH": str(MIGRATIONS_DIR.parent)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        invalid = await eventually(
            lambda: db.fetch(
                CHILD_INDEXES + " AND NOT x.indisvalid AND EXISTS (SELECT 1 FROM "
                "pg_stat_activity a WHERE a.wait_event_type = 'Lock' "
                "AND a.datname = current_database() "
                "AND a.query LIKE 'CREATE INDEX CONCURRENTLY%')",
                INDEX,
            ),
            what="the migrator's CONCURRENTLY build waiting, its index invalid",
            timeout_s=60,
        )
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        # Postgres ends the build when it sees its client gone (client_connection_check_interval):
        # the snapshot is kept until then, so the build cannot finish first.
        await eventually(
            lambda: db.fetchval(BUILDING),
            what="the killed migrator's backend gone",
            equals=0,
        )
    finally:
        proc.kill()
        await asyncio.to_thread(proc.wait)
        await snapshot.execute("ROLLBACK")
        await snapshot.close()
    assert await db.fetchval(RECORDED, INDEX_FILE) is None
    assert await db.fetchval(
        "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
        invalid[0]["name"],
    )
    with capture_context_logs() as logs:
        assert await migrate(database_url, directory) == [INDEX_FILE]
    dropped = [e["index"] for e in logs if e["event"] == "online_migration_invalid_index_dropped"]
    assert dropped == [invalid[0]["name"]]
    await assert_index_complete(db)
    await assert_recorded_complete(db, INDEX_FILE, INDEX_SQL)


async def test_a_backfill_runs_in_batches_and_retries_a_locked_row(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await db.execute("CREATE TABLE online_probe (id bigint PRIMARY KEY, note text)")
    await db.execute("INSERT INTO online_probe SELECT g, NULL FROM generate_series(1, 5000) g")
    directory = migrations_with(tmp_path, BATCH_FILE, BATCH_SQL)
    holder = await asyncpg.connect(database_url)
    with capture_context_logs() as logs:
        try:
            await holder.execute("BEGIN")
            await holder.execute("SELECT * FROM online_probe WHERE id = 4000 FOR UPDATE")
            migrating = asyncio.create_task(migrate(database_url, directory))
            await eventually(
                lambda: any(e["event"] == "online_migration_retry" for e in logs),
                what="a batch retried on the locked row",
            )
            # The batches before the locked row are committed already.
            assert await db.fetchval("SELECT count(*) FROM online_probe WHERE note = 'done'") > 0
            await holder.execute("COMMIT")
            assert await asyncio.wait_for(migrating, 60) == [BATCH_FILE]
        finally:
            await holder.close()
    assert await db.fetchval("SELECT count(*) FROM online_probe WHERE note IS NULL") == 0
    await assert_recorded_complete(db, BATCH_FILE, BATCH_SQL)
    done = [e for e in logs if e["event"] == "online_migration_progress"]
    assert done[-1]["rows_done"] == 5000


async def test_the_log_check_is_validated_online_and_a_breaking_row_stops_it(
    db: asyncpg.Connection, database_url: str
) -> None:
    assert await db.fetchval(
        "SELECT convalidated FROM pg_constraint WHERE conname = $1 AND "
        "conrelid = 'awooop_events'::regclass",
        CONSTRAINT,
    )
    # A log whose rows predate the CHECK, one of them breaking it.
    await db.execute(f"ALTER TABLE awooop_events DROP CONSTRAINT {CONSTRAINT}")
    await db.execute(
        "INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data) "
        "VALUES (gen_random_uuid(), 'domain/other/x', 1, 'p1', 'Forged', '{}')"
    )
    await db.execute(
        f"ALTER TABLE awooop_events ADD CONSTRAINT {CONSTRAINT} "
        "CHECK (awooop_stream_of_project(stream_id, project_id)) NOT VALID"
    )
    await db.execute("DELETE FROM awooop_schema_migrations WHERE name = $1", VALIDATE_FILE)
    with pytest.raises(asyncpg.CheckViolationError, match=CONSTRAINT):
        await migrate(database_url)
    assert await db.fetchval(RECORDED, VALIDATE_FILE) is None
    await db.execute("DELETE FROM awooop_events WHERE event_type = 'Forged'")
    assert await migrate(database_url) == [VALIDATE_FILE]
    unvalidated = await db.fetchval(
        "SELECT count(*) FROM pg_constraint WHERE conname = $1 AND NOT convalidated", CONSTRAINT
    )
    assert unvalidated == 0
    sql = (MIGRATIONS_DIR / VALIDATE_FILE).read_text()
    await assert_recorded_complete(db, VALIDATE_FILE, sql)


async def test_a_failed_online_migration_resumes_after_its_completed_steps(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    """Steps that completed are not run again (a second CREATE TABLE would fail); the file is
    recorded only once the last step is done."""
    sql = """-- awooop: online
    -- phase: expand
    CREATE TABLE online_resume (id bigint PRIMARY KEY, note text);
    INSERT INTO online_resume SELECT g, NULL FROM generate_series(1, 300) g;
    UPDATE online_resume SET note = (SELECT max(label) FROM online_labels)
    WHERE id IN (SELECT id FROM online_resume WHERE note IS NULL LIMIT $1);
    """
    name = "9003_online_test_resume.sql"
    directory = migrations_with(tmp_path, name, sql)
    with pytest.raises(asyncpg.UndefinedTableError):
        await migrate(database_url, directory)
    assert await db.fetchval(RECORDED, name) is None
    assert await db.fetchval(STEPS_LEFT, name) == 2
    await db.execute(
        "CREATE TABLE online_labels (label text); INSERT INTO online_labels VALUES ('x')"
    )
    with capture_context_logs() as logs:
        assert await migrate(database_url, directory) == [name]
    started = next(e for e in logs if e["event"] == "online_migration_started")
    assert (started["steps"], started["steps_done"]) == (3, 2)
    assert await db.fetchval("SELECT count(*) FROM online_resume WHERE note = 'x'") == 300
    await assert_recorded_complete(db, name, sql)


async def test_a_step_that_never_gets_its_lock_stops_with_a_coded_error(
    db: asyncpg.Connection, database_url: str
) -> None:
    await db.execute("CREATE TABLE online_blocked (id int)")
    holder = await asyncpg.connect(database_url)
    migrator = await asyncpg.connect(database_url)
    sql = "-- awooop: online\nALTER TABLE online_blocked ADD COLUMN note text;\n"
    try:
        await holder.execute("BEGIN; LOCK TABLE online_blocked IN ACCESS SHARE MODE")
        with pytest.raises(OnlineMigrationBlockedError) as info:
            await apply_online(migrator, "9004_blocked.sql", sql, Policy(attempts=2))
    finally:
        await holder.close()
        await migrator.close()
    assert info.value.code == "E-MIGRATE-006"
    assert "step 1" in info.value.message and "2 attempts" in info.value.message
    assert await db.fetchval(STEPS_LEFT, "9004_blocked.sql") == 0
    assert not await db.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'online_blocked'::regclass "
        "AND attname = 'note')"
    )
