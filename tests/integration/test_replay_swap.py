"""The swap carries everything other code relies on; interruptions leave the live table alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from awooop.core.db import Database
from awooop.core.errors import ReplayBusyError
from awooop.core.pools import connect
from awooop.projections.registry import get
from awooop.projections.replay import Replay, replay
from awooop.projections.schema import shadow_name
from tests.support.projection_workload import Workload

CATALOG = """
SELECT
  (SELECT array_agg(indexname || ':' || regexp_replace(indexdef, ' ON \\S+', '') ORDER BY indexname)
     FROM pg_indexes WHERE tablename = 'awooop_run_state') AS indexes,
  (SELECT array_agg(conname || ':' || pg_get_constraintdef(oid) ORDER BY conname)
     FROM pg_constraint WHERE conrelid = 'awooop_run_state'::regclass) AS constraints,
  (SELECT array_agg(policyname || ':' || qual || ':' || array_to_string(roles, ',')
                    ORDER BY policyname)
     FROM pg_policies WHERE tablename = 'awooop_run_state') AS policies,
  (SELECT relacl::text FROM pg_class WHERE oid = 'awooop_run_state'::regclass) AS grants,
  (SELECT relrowsecurity AND relforcerowsecurity FROM pg_class
     WHERE oid = 'awooop_run_state'::regclass) AS rls,
  (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'awooop_run_state'::regclass)
     AS owner
"""


async def catalog(db: Database) -> dict[str, Any]:
    async with db.platform() as conn:
        row = await conn.fetchrow(CATALOG)
    assert row is not None
    return dict(row.items())


@pytest.mark.connections(9)
async def test_swap_keeps_indexes_constraints_policies_grants_and_dependents(
    db: Database, database_url: str
) -> None:
    work = Workload(db, seed=3)
    await work.run(walkers=2, runs_each=5, max_steps=5)
    # Each walker's runs are the seed's, however the two interleave: walker 0's first run is
    # deleted below, and its project keeps other runs for the row-level security check.
    project, run_id = work.walks[0][0]
    assert [p for p, _ in work.walks[0] + work.walks[1]].count(project) > 1
    conn = await connect(database_url)  # the owner, as a migration would
    try:
        await conn.execute(
            """
            CREATE VIEW run_status_view AS SELECT run_id, status FROM awooop_run_state;
            CREATE TABLE run_notes (note_id serial PRIMARY KEY,
                run_id uuid NOT NULL REFERENCES awooop_run_state (run_id) ON DELETE CASCADE);
            CREATE TABLE status_changes (run_id uuid, status text);
            CREATE FUNCTION record_status() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO status_changes VALUES (NEW.run_id, NEW.status); RETURN NEW; END $$;
            CREATE TRIGGER run_status_changes AFTER UPDATE OF status ON awooop_run_state
                FOR EACH ROW EXECUTE FUNCTION record_status();
            """
        )
        await conn.execute("INSERT INTO run_notes (run_id) VALUES ($1)", run_id)
    finally:
        await conn.close()
    before = await catalog(db)

    report = await replay(database_url, get("run_state"), swap=True)
    assert report.swapped and report.differences == 0
    assert await catalog(db) == before

    conn = await connect(database_url)
    try:
        # the view and the foreign key follow the new table
        assert await conn.fetchval("SELECT count(*) FROM run_status_view") == len(work.run_ids)
        assert await conn.fetchval(
            "SELECT convalidated FROM pg_constraint WHERE conname = 'run_notes_run_id_fkey'"
        )
        await conn.execute("DELETE FROM awooop_run_state WHERE run_id = $1", run_id)
        assert await conn.fetchval("SELECT count(*) FROM run_notes") == 0  # cascaded
        # the trigger fires on the new table
        other = work.walks[1][0][1]
        await conn.execute(
            "UPDATE awooop_run_state SET status = 'CANCELLED' WHERE run_id = $1", other
        )
        assert await conn.fetchval("SELECT count(*) FROM status_changes") == 1
        assert not await conn.fetchval("SELECT to_regclass('awooop_run_state__old') IS NOT NULL")
    finally:
        await conn.close()
    # row-level security still isolates tenants: each project sees its own runs only
    kept = sorted({p for p, r in work.run_ids if r != run_id})
    assert project in kept and len(kept) > 1
    for tenant in kept:
        async with db.tenant(tenant) as conn:
            projects = await conn.fetch("SELECT DISTINCT project_id FROM awooop_run_state")
        assert [r["project_id"] for r in projects] == [tenant]


@pytest.mark.connections(10)
async def test_interrupting_leaves_the_live_table_untouched_and_a_rerun_starts_clean(
    db: Database, database_url: str
) -> None:
    work = Workload(db, seed=4)
    await work.run(walkers=2, runs_each=10, max_steps=8)
    async with db.platform_writes() as conn:
        await conn.execute("UPDATE awooop_run_state SET attempt_count = 99 WHERE true")
        before = await conn.fetch("SELECT * FROM awooop_run_state ORDER BY run_id")
        oid = await conn.fetchval("SELECT 'awooop_run_state'::regclass::oid")

    def interrupt(events: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await Replay(database_url, get("run_state"), on_events=interrupt).run(swap=True)
    conn = await connect(database_url)
    try:
        assert await conn.fetch("SELECT * FROM awooop_run_state ORDER BY run_id") == before
        assert await conn.fetchval("SELECT 'awooop_run_state'::regclass::oid") == oid
        assert (
            await conn.fetchval("SELECT to_regclass($1)", shadow_name("awooop_run_state")) is None
        )
        # a replay killed -9 leaves its shadow behind: simulate one, with a stale row
        await conn.execute(
            f"CREATE TABLE {shadow_name('awooop_run_state')} AS SELECT * FROM awooop_run_state"
        )
    finally:
        await conn.close()
    report = await replay(database_url, get("run_state"), swap=True)
    assert report.swapped and report.diffs[0].different == len(before)
    assert (await replay(database_url, get("run_state"))).differences == 0


async def test_one_replay_of_a_projection_at_a_time(db: Database, database_url: str) -> None:
    await Workload(db, seed=8).run(walkers=1, runs_each=3, max_steps=3)
    started = asyncio.Event()
    release = asyncio.Event()

    first = Replay(database_url, get("run_state"))
    original = first._catch_up

    async def slow_catch_up(*args: Any) -> Any:
        started.set()
        await release.wait()
        return await original(*args)

    first._catch_up = slow_catch_up  # type: ignore[method-assign]  # hold the first replay
    task = asyncio.create_task(first.run())
    await started.wait()
    with pytest.raises(ReplayBusyError):
        await replay(database_url, get("run_state"))
    release.set()
    assert (await task).differences == 0


def exit_slowly(replaying: Replay, holder: Any) -> list[asyncio.Task[None]]:
    """Make the replay's terminated sessions seem to exit 0.3 s late: as its cleanup starts
    (after it terminated them, as it does first), ``holder`` takes the replay's advisory lock
    and keeps it 0.3 s, as a backend still exiting would. The tasks that release it."""
    cleanup = replaying._cleanup
    releases: list[asyncio.Task[None]] = []

    async def release_later() -> None:
        await asyncio.sleep(0.3)
        await holder.close()

    async def late_release(*args: Any, **kwargs: Any) -> None:
        for conn in replaying._connections:  # what the cleanup does first
            conn.terminate()
        replaying._connections.clear()
        await holder.fetchval(
            "SELECT pg_advisory_lock(hashtextextended('awooop-replay:' || $1, 0))", "run_state"
        )
        releases.append(asyncio.create_task(release_later()))
        await cleanup(*args, **kwargs)

    replaying._cleanup = late_release  # type: ignore[method-assign]  # the slow backend exit
    return releases


@pytest.mark.connections(9)
async def test_a_verify_leaves_no_shadow_behind(db: Database, database_url: str) -> None:
    # The replay's terminated sessions release its advisory lock only as their backends exit,
    # a moment after terminate(): the cleanup must wait for the lock, not try it once (that
    # lost the race in CI, kept the shadow, and `awooop doctor` then failed on a tenant table
    # without forced RLS).
    await Workload(db, seed=9).run(walkers=1, runs_each=3, max_steps=3)
    replaying = Replay(database_url, get("run_state"))
    releases = exit_slowly(replaying, await connect(database_url))
    assert (await replaying.run()).differences == 0
    await asyncio.gather(*releases)
    async with db.platform() as conn:
        shadow = await conn.fetchval("SELECT to_regclass($1)", shadow_name("awooop_run_state"))
    assert shadow is None


@pytest.mark.connections(9)
async def test_a_replay_started_as_a_swap_returns_is_not_refused_as_busy(
    db: Database, database_url: str
) -> None:
    """A swap returns only once its lock is free: the next replay, started at once, runs (it
    was refused with ReplayBusyError while the swap's control backend was still exiting)."""
    await Workload(db, seed=11).run(walkers=1, runs_each=3, max_steps=3)
    swapping = Replay(database_url, get("run_state"))
    releases = exit_slowly(swapping, await connect(database_url))
    assert (await swapping.run(swap=True)).swapped
    assert (await replay(database_url, get("run_state"))).differences == 0
    await asyncio.gather(*releases)


@pytest.mark.connections(9)
async def test_the_shadow_has_the_live_tables_row_level_security_while_it_is_built(
    db: Database, database_url: str
) -> None:
    await Workload(db, seed=10).run(walkers=2, runs_each=3, max_steps=3)
    seen: dict[str, Any] = {}
    replaying = Replay(database_url, get("run_state"))
    original = replaying._catch_up

    async def look(*args: Any) -> Any:  # the shadow is built; the swap has not happened
        shadow = shadow_name("awooop_run_state")
        async with db.platform() as conn:
            seen["flags"] = await conn.fetchrow(
                "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = $1::regclass",
                shadow,
            )
            seen["policies"] = await conn.fetchval(
                "SELECT count(*) FROM pg_policies WHERE tablename = $1", shadow
            )
            seen["live_policies"] = await conn.fetchval(
                "SELECT count(*) FROM pg_policies WHERE tablename = 'awooop_run_state'"
            )
            seen["all_rows"] = await conn.fetchval(f"SELECT count(*) FROM {shadow}")
        async with db.tenant("nobody-here") as conn:
            seen["foreign_rows"] = await conn.fetchval(f"SELECT count(*) FROM {shadow}")
        return await original(*args)

    replaying._catch_up = look  # type: ignore[method-assign]  # look mid-replay
    assert (await replaying.run()).differences == 0
    assert tuple(seen["flags"]) == (True, True)
    # every policy of the live table (the setting's isolation, a producer login's binding)
    assert seen["policies"] == seen["live_policies"] >= 2
    assert seen["all_rows"] > 0 and seen["foreign_rows"] == 0
