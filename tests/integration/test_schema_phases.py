"""Expand and contract on a live fleet: every long-running process registers with its release
and checks the schema again while it runs; ``awooop migrate`` holds back a contract step that
would stop a live process of an older release, and ``--check`` names it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import asyncpg
import msgspec
import pytest

from awooop.commands.doctor_results import OK, WARN
from awooop.commands.doctor_schema import fleet as doctor_fleet
from awooop.core.config import Settings
from awooop.core.errors import MigrationPhaseError
from awooop.core.migrate import MIGRATIONS_DIR, migrate_in_phases, plan_pending
from awooop.core.migration_phases import Phase
from awooop.core.schema_check import release_name
from awooop.core.schema_watch import SchemaWatch
from awooop.services import Services
from tests.support.waiting import eventually
from tests.support.workers import cli, relay_process

CONTRACT = """-- phase: contract
ALTER TABLE awooop_processes DROP COLUMN IF EXISTS probe;
UPDATE awooop_schema_floor SET oldest_release = '0990_contract_probe.sql';
"""
EXPAND_AFTER = "-- phase: expand\nCREATE TABLE probe_after_contract (a int);\n"


async def fetchval(url: str, sql: str, *args: object) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def live_row(url: str, release: str, kind: str = "serve") -> None:
    await fetchval(
        url,
        "INSERT INTO awooop_processes (instance, kind, host, pid, release, recheck_s) "
        "VALUES ($1, $2, 'old-host', 4242, $3, 30)",
        f"old-host:4242:{kind}",
        kind,
        release,
    )


def with_contract(tmp_path: Path) -> Path:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy)
    (copy / "0990_contract_probe.sql").write_text(CONTRACT)
    (copy / "0991_expand_after.sql").write_text(EXPAND_AFTER)
    return copy


async def test_a_contract_step_waits_until_no_live_process_runs_an_older_release(
    settings: Settings, tmp_path: Path
) -> None:
    url = settings.database_url
    folder = with_contract(tmp_path)
    await live_row(url, "0120_released_repairs_and_schema_floor.sql")

    check = await plan_pending(url, folder)
    assert [s.name for s in check.apply] == []
    assert [(s.name, s.phase) for s in check.held] == [
        ("0990_contract_probe.sql", Phase.CONTRACT),
        ("0991_expand_after.sql", Phase.EXPAND),
    ]
    assert [p.pid for p in check.stopped_by_held] == [4242]

    held = await migrate_in_phases(url, folder)
    assert held.applied == [] and held.plan.breaks_fleet
    assert await fetchval(url, "SELECT oldest_release FROM awooop_schema_floor") != (
        "0990_contract_probe.sql"
    )

    # The old process is replaced: its row goes, and the contract step applies.
    await fetchval(url, "DELETE FROM awooop_processes WHERE pid = 4242")
    done = await migrate_in_phases(url, folder)
    assert done.applied == ["0990_contract_probe.sql", "0991_expand_after.sql"]
    assert await fetchval(url, "SELECT oldest_release FROM awooop_schema_floor") == (
        "0990_contract_probe.sql"
    )


async def test_the_expand_phase_applies_up_to_the_contract_step_whoever_runs(
    settings: Settings, tmp_path: Path
) -> None:
    folder = with_contract(tmp_path)
    (folder / "0989_expand_before.sql").write_text("-- phase: expand\nCREATE TABLE e (a int);\n")
    outcome = await migrate_in_phases(settings.database_url, folder, expand_only=True)
    assert outcome.applied == ["0989_expand_before.sql"]
    assert [s.name for s in outcome.plan.held][:1] == ["0990_contract_probe.sql"]
    assert not outcome.plan.breaks_fleet


async def test_a_stale_row_does_not_hold_the_contract_step_back(
    settings: Settings, tmp_path: Path
) -> None:
    url = settings.database_url
    await live_row(url, "0001_initial.sql")
    await fetchval(url, "UPDATE awooop_processes SET seen_at = now() - interval '1 hour'")
    outcome = await migrate_in_phases(url, with_contract(tmp_path))
    assert outcome.applied == ["0990_contract_probe.sql", "0991_expand_after.sql"]


def test_a_file_without_its_phase_is_refused_before_anything_is_written(
    settings: Settings, tmp_path: Path
) -> None:
    folder = with_contract(tmp_path)
    (folder / "0992_undeclared.sql").write_text("CREATE TABLE undeclared (a int);\n")
    with pytest.raises(MigrationPhaseError) as refused:
        asyncio.run(migrate_in_phases(settings.database_url, folder))
    assert "0992_undeclared.sql" in refused.value.message
    assert asyncio.run(fetchval(settings.database_url, "SELECT to_regclass('e')")) is None


async def test_the_watch_registers_and_stops_a_process_whose_schema_moved_on(
    settings: Settings, services: Services
) -> None:
    url = settings.database_url
    stopped = asyncio.Event()
    watch = SchemaWatch(services.db, "worker", 0.1, on_unrunnable=stopped.set)
    await watch.start()
    try:
        release = await fetchval(
            url, "SELECT release FROM awooop_processes WHERE instance = $1", watch.instance
        )
        assert release == release_name()
        await fetchval(url, "UPDATE awooop_schema_floor SET oldest_release = '9999_future.sql'")
        await asyncio.wait_for(stopped.wait(), timeout=60)
    finally:
        await watch.stop()
    assert await fetchval(url, "SELECT count(*) FROM awooop_processes") == 0


async def test_a_running_relay_stops_when_a_contract_step_leaves_its_release_behind(
    settings: Settings, tmp_path: Path
) -> None:
    url = settings.database_url
    rechecking = msgspec.structs.replace(settings, schema_recheck_s=0.5)
    relay = relay_process(rechecking, tmp_path).start()
    try:
        registered = "SELECT count(*) = 1 FROM awooop_processes WHERE kind = 'relay'"
        await eventually(lambda: fetchval(url, registered), what="the relay's row", timeout_s=90)
        check = await asyncio.to_thread(cli, rechecking, "migrate", "--check")
        assert check.returncode == 0, check.stderr
        assert check.stdout.startswith("would apply 0 migration(s)"), check.stdout

        await fetchval(url, "UPDATE awooop_schema_floor SET oldest_release = '9999_future.sql'")
        await asyncio.to_thread(relay.wait, 90)
    finally:
        relay.stop()
    logs = relay.logs()
    assert "schema_no_longer_runnable" in logs and "9999_future.sql" in logs, logs
    assert "Traceback" not in logs, logs
    assert await fetchval(url, "SELECT count(*) FROM awooop_processes") == 0


async def test_doctor_warns_while_the_fleet_runs_two_releases(
    settings: Settings, services: Services
) -> None:
    [alone] = await doctor_fleet(services)
    assert alone.status == OK and alone.detail == "0 live process(es)"
    watch = SchemaWatch(services.db, "worker", 30)
    await watch.start()
    try:
        [current] = await doctor_fleet(services)
        assert current.status == OK and f"1 on {release_name()}" in current.detail
        await live_row(settings.database_url, "0120_released_repairs_and_schema_floor.sql")
        [mixed] = await doctor_fleet(services)
        assert mixed.status == WARN and "2 release(s)" in mixed.detail, mixed
    finally:
        await watch.stop()
