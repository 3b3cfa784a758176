"""`awooop doctor` names each seeded problem and exits non-zero; a healthy system exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import msgspec
import redis.asyncio as aioredis

from awooop.config import Settings
from awooop.db import Database
from awooop.doctor import FAIL
from awooop.runs import leases, store
from streams.keys import WORKER_GROUP, Keys
from tests.support import factories


def doctor(settings: Settings) -> tuple[int, list[dict[str, str]]]:
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_REDIS_URL": settings.redis_url,
        "AWOOOP_REDIS_KEY_PREFIX": settings.redis_key_prefix,
    }
    result = subprocess.run(
        [sys.executable, "-m", "awooop.cli", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, msgspec.json.decode(result.stdout.strip().splitlines()[-1])


async def healthy(settings: Settings, db: Database) -> Keys:
    keys = Keys(settings.redis_key_prefix, settings.shard_count)
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        for shard in keys.shards():
            await client.xgroup_create(keys.work_stream(shard), WORKER_GROUP, id="0", mkstream=True)
    finally:
        await client.aclose()
    async with db.platform() as conn:
        await conn.execute(
            "INSERT INTO awooop_loop_heartbeats (loop_name, project_id, category, interval_s, "
            "last_success_at, host, pid) VALUES ('reaper', '__platform__', 'platform', 10, "
            "now(), 'h', 1)"
        )
    return keys


async def test_a_healthy_system_passes(settings: Settings, db: Database) -> None:
    await healthy(settings, db)
    code, results = doctor(settings)
    assert [r for r in results if r["status"] == FAIL] == []
    assert code == 0
    assert {"postgres", "redis", "migrations", "tenancy"} <= {r["name"] for r in results}
    # The tests log in as a superuser: a warning that names the fix, not a failure.
    [login] = [r for r in results if r["name"] == "login role"]
    assert login["status"] == "WARN" and "superuser" in login["detail"], login
    assert "awooop_app and awooop_platform" in login["fix"]


async def test_each_seeded_problem_is_named_and_fails(settings: Settings, db: Database) -> None:
    keys = await healthy(settings, db)
    async with db.platform() as conn:  # a loop that stopped an hour ago
        await conn.execute(
            "UPDATE awooop_loop_heartbeats SET last_success_at = now() - interval '1 hour'"
        )
    run_id = uuid.uuid4()  # a RUNNING run whose lease expired long ago (no reaper running)
    async with db.tenant("p1") as conn:
        now = await conn.fetchval("SELECT now()")
        await store.create_run(conn, factories.created(run_id=run_id, project_id="p1", at=now))
        await leases.claim(conn, run_id, "w-gone", 30)
    async with db.platform() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 hour' WHERE run_id = $1",
            run_id,
        )
        revision = await conn.fetchval(  # an outbox row nobody delivered for 10 minutes
            "INSERT INTO awooop_contract_revisions (project_id, contract_family, contract_id, "
            "body, body_hash) VALUES ('p1', 'policy_routing', 'c', '{}', 'h') "
            "RETURNING revision_id"
        )
        await conn.execute(
            "INSERT INTO awooop_contract_outbox (event_type, project_id, contract_family, "
            "contract_id, new_revision_id, created_at) VALUES ('revision_activated', 'p1', "
            "'policy_routing', 'c', $1, now() - interval '10 minutes')",
            revision,
        )
    client = aioredis.Redis.from_url(settings.redis_url)  # a group that disappeared
    try:
        await client.xgroup_destroy(keys.work_stream(0), WORKER_GROUP)
    finally:
        await client.aclose()
    code, results = doctor(settings)
    failed = {r["name"] for r in results if r["status"] == FAIL}
    assert code == 1
    assert "loop reaper/__platform__" in failed
    assert "leases" in failed
    assert "outbox contract" in failed
    assert f"group {keys.work_stream(0)}" in failed
    assert all(r["fix"] for r in results if r["status"] == FAIL)
