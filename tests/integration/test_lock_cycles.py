"""Lock cycles between the runtime and whoever else writes its tables end with the other side
giving way, or with the attempt handed back: never with a run failed.

A migration file that is not online runs whole in one transaction. It holds each table it
altered until it commits, so a runtime transaction holding a row of the next table and then
reading the first one closes a cycle. Postgres' deadlock check ends one side, whichever waited
``deadlock_timeout`` (1 s) first. The migrator waits for each lock at most
``WHOLE_FILE_LOCK_TIMEOUT_S``, so it gives way first and tries the file again. A conflict that
still reaches a runtime call past its retries is the store being busy: the attempt is handed
back uncharged.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.migrate import MIGRATIONS_DIR, migrate
from awooop.core.online_plan import WHOLE_FILE_LOCK_TIMEOUT_S
from awooop.worker.assembly import build_worker
from tests.support import handlers
from tests.support.handlers import effects_of
from tests.support.ingest import COUNTED, ingest_app
from tests.support.logcapture import capture_context_logs
from tests.support.runs import create_runs, has_status, load
from tests.support.waiting import eventually
from tests.support.webhooks import fresh
from tests.support.workers import cli

P = "proj-lock-cycles"
FILE = "9101_lock_cycle.sql"
# The pause holds cycle_a's lock before cycle_b's is asked for: the runtime side then waits
# first, and it is the side whose deadlock check would fire first.
MIGRATION = """-- phase: expand
-- A plain file: one transaction that locks cycle_a, then cycle_b.
ALTER TABLE cycle_a ADD COLUMN note text;
SELECT pg_sleep({pause_s});
ALTER TABLE cycle_b ADD COLUMN note text;
"""
TABLES = """
CREATE TABLE cycle_a (id int PRIMARY KEY, v int NOT NULL);
CREATE TABLE cycle_b (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO cycle_a VALUES (1, 0);
INSERT INTO cycle_b VALUES (1, 0);
"""
# The migrator's lock on a table: granted, or asked for and waiting.
MIGRATOR_LOCK = """
SELECT l.granted FROM pg_locks l
WHERE l.relation = to_regclass($1) AND l.mode = 'AccessExclusiveLock' AND l.pid <> $2
"""
COLUMNS = """
SELECT count(*) FROM information_schema.columns
WHERE table_name IN ('cycle_a', 'cycle_b') AND column_name = 'note'
"""
# A lock cycle on demand, for as long as the flag table has a row: every statement that
# fires the trigger, and so every retry of it, ends with Postgres' deadlock error (40P01).
INJECTED_CYCLE = """
CREATE TABLE cycle_flag (on_ boolean);
INSERT INTO cycle_flag VALUES (true);
GRANT SELECT ON cycle_flag TO PUBLIC;
CREATE FUNCTION cycle_when_flagged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cycle_flag) THEN
        RAISE EXCEPTION 'deadlock detected (injected by the test)'
            USING ERRCODE = 'deadlock_detected';
    END IF;
    RETURN NEW;
END
$$;
"""
# Step two's journal write: the update that adds its saga step to the run's row.
ON_STEP_TWO = """
CREATE TRIGGER cycle_on_step_two BEFORE UPDATE ON awooop_run_state FOR EACH ROW
    WHEN (NEW.saga_steps ? 'two' AND NOT coalesce(OLD.saga_steps ? 'two', false))
    EXECUTE FUNCTION cycle_when_flagged();
"""
# Any change of a run's row.
ON_RUN_CHANGE = """
CREATE TRIGGER cycle_on_run_change BEFORE UPDATE ON awooop_run_state FOR EACH ROW
    EXECUTE FUNCTION cycle_when_flagged();
"""
# A delivery's run row.
ON_NEW_RUN = """
CREATE TRIGGER cycle_on_new_run BEFORE INSERT ON awooop_run_state FOR EACH ROW
    EXECUTE FUNCTION cycle_when_flagged();
"""


@pytest.fixture
async def owner(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    yield conn
    await conn.close()


def migrations_with(tmp_path: Path, sql: str) -> Path:
    directory = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, directory)
    (directory / FILE).write_text(sql)
    return directory


@pytest.mark.parametrize("first", ["runtime", "migrator"])
async def test_the_migrator_gives_way_in_a_lock_cycle_with_a_runtime_transaction(
    owner: asyncpg.Connection, database_url: str, tmp_path: Path, first: str
) -> None:
    """The runtime's transaction holds a row of cycle_b and reads cycle_a while the migrator
    holds cycle_a and asks for cycle_b. ``first`` says who starts waiting first: the runtime
    (the migrator pauses between its two tables) or the migrator (it asks at once). Either
    way the runtime's statement returns, and the migration is applied by a later try."""
    await owner.execute(TABLES)
    pause_s = 0.15 if first == "runtime" else 0.0
    directory = migrations_with(tmp_path, MIGRATION.format(pause_s=pause_s))
    runtime = await asyncpg.connect(database_url)
    with capture_context_logs() as logs:
        try:
            await runtime.execute("BEGIN")
            await runtime.execute("UPDATE cycle_b SET v = v + 1 WHERE id = 1")
            migrating = asyncio.create_task(migrate(database_url, directory))
            pid = runtime.get_server_pid()
            if first == "runtime":
                await eventually(
                    lambda: owner.fetchval(MIGRATOR_LOCK, "cycle_a", pid),
                    what="the migrator holding cycle_a",
                    interval_s=0.01,
                )
            else:
                await eventually(
                    lambda: owner.fetchval(MIGRATOR_LOCK, "cycle_b", pid),
                    equals=False,
                    what="the migrator waiting for cycle_b",
                    interval_s=0.01,
                )
            # Closes the cycle; returns once the migrator gave way.
            assert await runtime.fetchval("SELECT v FROM cycle_a WHERE id = 1") == 0
            await runtime.execute("COMMIT")
            assert await asyncio.wait_for(migrating, 60) == [FILE]
        finally:
            await runtime.close()
    retries = [e for e in logs if e["event"] == "migration_retry"]
    assert retries and {e["migration"] for e in retries} == {FILE}
    assert {e["error"] for e in retries} <= {"LockNotAvailableError", "DeadlockDetectedError"}
    assert await owner.fetchval(COLUMNS) == 2
    assert await owner.fetchval("SELECT v FROM cycle_b WHERE id = 1") == 1
    # Below deadlock_timeout (1 s): the migrator's wait ends before the runtime's check.
    assert WHOLE_FILE_LOCK_TIMEOUT_S < 1.0


async def test_a_lock_cycle_past_every_retry_hands_the_attempt_back_uncharged(
    fast: Settings, owner: asyncpg.Connection
) -> None:
    """Step two's journal write ends in a deadlock every time it is tried while the flag is
    set: the attempt is abandoned (E-DB-003), not failed, and once the cycle is gone the next
    attempt completes without repeating step one, with the run's budget whole."""
    await owner.execute(INJECTED_CYCLE + ON_STEP_TWO)
    quick = msgspec.structs.replace(fast, lease_ttl_s=20.0, heartbeat_interval_s=0.5)
    db = await Database.open(quick.database_url, max_size=4, run_timeout_s=quick.lease_io_timeout_s)
    [run_id] = await create_runs(db, P, payload={})
    worker = build_worker(db=db, settings=quick, handler=handlers.journaled, concurrency=2).worker
    stop = asyncio.Event()
    with capture_context_logs() as logs:
        serving = asyncio.create_task(worker.run(stop))
        try:
            await eventually(
                lambda: any(e["event"] == "attempt_abandoned" for e in logs),
                what="the attempt abandoned",
            )
            await owner.execute("DELETE FROM cycle_flag")

            await eventually(
                lambda: has_status(db, P, run_id, "COMPLETED"),
                what="the run completed in its next attempt",
            )
        finally:
            stop.set()
            await serving
            await db.close()
    [abandoned, *_] = [e for e in logs if e["event"] == "attempt_abandoned"]
    assert abandoned["code"] == "E-DB-003" and "DeadlockDetectedError" in abandoned["reason"]
    state = await owner.fetchrow(
        "SELECT attempt_count, max_attempts, failure_code FROM awooop_run_state WHERE run_id = $1",
        run_id,
    )
    assert state["attempt_count"] >= 2 and state["failure_code"] is None
    # Every abandoned attempt was given back uncharged: the budget grew with each.
    assert state["max_attempts"] == quick.max_attempts + state["attempt_count"] - 1
    assert len(effects_of(run_id, "one")) == 1  # journaled, not repeated
    assert len(effects_of(run_id, "two")) == state["attempt_count"]


async def test_an_ingest_in_a_lock_cycle_past_its_retries_answers_503_and_writes_nothing(
    settings: Settings, owner: asyncpg.Connection
) -> None:
    """A delivery whose run insert meets a deadlock every time it is tried: 503 E-DB-003 with
    Retry-After (retry later), not 500, and nothing written; once the cycle is gone the same
    app takes the delivery."""
    await owner.execute(INJECTED_CYCLE + ON_NEW_RUN)
    async with ingest_app(settings) as ingest:
        before = {t: await owner.fetchval(q) for t, q in COUNTED.items()}
        delivery = fresh("api")
        response = await ingest.post(delivery)
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "E-DB-003"
        assert int(response.headers["Retry-After"]) > 0
        assert {t: await owner.fetchval(q) for t, q in COUNTED.items()} == before
        await owner.execute("DELETE FROM cycle_flag")
        assert (await ingest.post(delivery)).status_code == 202


async def test_a_command_in_a_lock_cycle_past_its_retries_says_so_in_one_line(
    settings: Settings, db: Database, owner: asyncpg.Connection
) -> None:
    """``awooop runs cancel`` whose write meets a deadlock every time: ``error E-DB-003``
    and exit status 1, no traceback, the run as it was; once the cycle is gone it cancels."""
    [run_id] = await create_runs(db, P)
    await owner.execute(INJECTED_CYCLE + ON_RUN_CHANGE)
    done = await asyncio.to_thread(cli, settings, "runs", "cancel", P, str(run_id))
    assert done.returncode == 1, done
    assert done.stderr.startswith("error E-DB-003: "), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert (await load(db, P, run_id)).status == "PENDING"
    await owner.execute("DELETE FROM cycle_flag")
    done = await asyncio.to_thread(cli, settings, "runs", "cancel", P, str(run_id))
    assert done.returncode == 0, done
    assert (await load(db, P, run_id)).status == "CANCELLED"
