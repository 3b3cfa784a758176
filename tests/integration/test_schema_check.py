"""A process runs only on a schema its release can run on: every migration of the release
applied as a released version. It refuses to start otherwise (E-MIGRATE-003, one line, exit 1),
``/readyz`` answers 503 saying why, and ``awooop doctor`` fails the migrations check; files a
newer release applied are reported, not refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg
import httpx
import pytest

from awooop.commands.doctor_results import FAIL, OK, WARN
from awooop.commands.doctor_schema import migrations as doctor_migrations
from awooop.core.config import Settings
from awooop.core.errors import SchemaMismatchError
from awooop.core.migrate import discover
from awooop.core.migration_checksums import Recorded, raw_checksum
from awooop.core.schema_check import compare_schema
from awooop.http.app import create_app
from awooop.services import Services

NEWEST = discover()[-1].name


async def execute(url: str, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def forget(url: str, name: str) -> None:
    """The database as if this release's ``name`` had not been applied (its record gone)."""
    await execute(url, "DELETE FROM awooop_schema_migrations WHERE name = $1", name)


async def readyz(services: Services) -> httpx.Response:
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://awooop.test") as client:
        return await client.get("/readyz")


def test_the_verdict_names_what_is_missing_changed_and_newer() -> None:
    files = discover()
    applied = {m.name: Recorded(raw_checksum(m.sql), m.checksum) for m in files}
    assert compare_schema(files, applied).runnable
    first, last = files[0].name, files[-1].name
    state = compare_schema(
        files,
        {
            **{k: v for k, v in applied.items() if k != last},
            first: Recorded("0" * 64, None),
            "9999_n.sql": Recorded("", None),
        },
    )
    assert (state.missing, state.unreleased, state.newer) == ([last], [first], ["9999_n.sql"])
    assert not state.runnable
    assert last in state.problem() and "awooop migrate" in state.problem()
    assert compare_schema(files, {**applied, "9999_n.sql": Recorded("", None)}).runnable
    assert compare_schema(files, applied, floor=last).runnable
    raised = compare_schema(files, applied, floor="9999_n.sql")
    assert raised.too_old and not raised.runnable and "9999_n.sql" in raised.problem()


async def test_a_process_refuses_a_schema_missing_one_of_its_migrations(
    settings: Settings, services: Services
) -> None:
    assert (await readyz(services)).status_code == 200
    await forget(settings.database_url, NEWEST)

    with pytest.raises(SchemaMismatchError) as refused:
        await Services.open_when_reachable(settings, db_pool_size=1, wait_s=5)
    assert refused.value.code == "E-MIGRATE-003" and NEWEST in refused.value.message

    ready = await readyz(services)
    assert ready.status_code == 503, ready.text
    schema = ready.json()["checks"]["schema"]
    assert schema.startswith("error: E-MIGRATE-003") and NEWEST in schema, schema
    [check] = await doctor_migrations(services)
    assert check.status == FAIL and NEWEST in check.detail

    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "awooop.cli", "relay"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "AWOOOP_DATABASE_URL": settings.database_url,
            "AWOOOP_REDIS_URL": settings.redis_url,
            "AWOOOP_REDIS_KEY_PREFIX": settings.redis_key_prefix,
            "AWOOOP_METRICS_PORT": "0",
        },
        timeout=120,
        check=False,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert lines[-1].startswith("error E-MIGRATE-003:") and NEWEST in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


async def test_migrations_of_a_newer_release_are_reported_not_refused(
    settings: Settings, services: Services
) -> None:
    await execute(
        settings.database_url,
        "INSERT INTO awooop_schema_migrations (name, checksum) VALUES ('9999_newer.sql', 'x')",
    )
    opened = await Services.open_when_reachable(settings, db_pool_size=1, wait_s=5)
    await opened.close()
    assert (await readyz(services)).status_code == 200
    [check] = await doctor_migrations(services)
    assert check.status == WARN and "9999_newer.sql" in check.detail


async def test_a_current_schema_passes_every_check(services: Services) -> None:
    [check] = await doctor_migrations(services)
    assert check.status == OK, check
    body = (await readyz(services)).json()
    assert body["checks"]["schema"] == "ok", body


async def test_a_release_below_the_schema_floor_refuses(
    settings: Settings, services: Services
) -> None:
    """A newer release's contract step raises the floor past this release's newest file."""
    await execute(
        settings.database_url,
        "UPDATE awooop_schema_floor SET oldest_release = $1",
        "9999_contract_step.sql",
    )
    with pytest.raises(SchemaMismatchError) as refused:
        await Services.open_when_reachable(settings, db_pool_size=1, wait_s=5)
    assert "9999_contract_step.sql" in refused.value.message and NEWEST in refused.value.message
    assert (await readyz(services)).status_code == 503
    [check] = await doctor_migrations(services)
    assert check.status == FAIL and "9999_contract_step.sql" in check.detail

    await execute(
        settings.database_url, "UPDATE awooop_schema_floor SET oldest_release = $1", NEWEST
    )
    opened = await Services.open_when_reachable(settings, db_pool_size=1, wait_s=5)
    await opened.close()
