"""`awooop doctor` names each seeded problem and exits non-zero; a healthy system exits 0.
During an outage it names the store that does not answer (not a missing stream or group) and
tells a loop that fails inside a running process from one whose process stopped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

import msgspec
import redis.asyncio as aioredis

from awooop.commands.doctor_results import FAIL, OK
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.demo.servers import free_port
from awooop.eventlog.runs import create_run
from awooop.runs import leases
from awooop.streams.keys import WORKER_GROUP, Keys
from tests.support import factories
from tests.support.services import private_redis


def doctor(settings: Settings, *flags: str) -> tuple[int, list[dict[str, str]]]:
    code, out = doctor_output(settings, "--json", *flags)
    return code, msgspec.json.decode(out.strip().splitlines()[-1])


def doctor_output(settings: Settings, *flags: str) -> tuple[int, str]:
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_REDIS_URL": settings.redis_url,
        "AWOOOP_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "AWOOOP_REDIS_SOCKET_TIMEOUT_S": "3",
    }
    result = subprocess.run(
        [sys.executable, "-m", "awooop.cli", "doctor", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout


async def healthy(settings: Settings, db: Database) -> Keys:
    keys = Keys(settings.redis_key_prefix, settings.shard_count)
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        for shard in keys.shards():
            await client.xgroup_create(keys.work_stream(shard), WORKER_GROUP, id="0", mkstream=True)
    finally:
        await client.aclose()
    async with db.platform_writes() as conn:
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
    async with db.platform_writes() as conn:  # a loop whose process stopped an hour ago
        await conn.execute(
            "UPDATE awooop_loop_heartbeats SET last_success_at = now() - interval '1 hour', "
            "updated_at = now() - interval '1 hour'"
        )
    run_id = uuid.uuid4()  # a RUNNING run whose lease expired long ago (no reaper running)
    async with db.tenant("p1") as conn:
        now = await conn.fetchval("SELECT now()")
        await create_run(conn, factories.created(run_id=run_id, project_id="p1", at=now))
        await leases.claim(conn, run_id, "w-gone", 30)
    async with db.platform_writes() as conn:
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


async def test_with_redis_stopped_doctor_names_redis_unreachable(
    settings: Settings, db: Database
) -> None:
    with private_redis() as server:
        private = msgspec.structs.replace(settings, redis_url=server.url)
        await healthy(private, db)
        code, results = doctor(private)
        assert code == 0, results
        server.stop()
        code, results = doctor(private)
        code_text, text = doctor_output(private)
    assert code == 1 and code_text == 1
    by_name = {r["name"]: r for r in results}
    redis = by_name["redis"]
    assert redis["status"] == FAIL and redis["detail"].startswith("unreachable:"), redis
    assert "AWOOOP_REDIS_URL" in redis["fix"] and "Redis was wiped or restarted" in redis["fix"]
    # Not read as a missing stream or group: the Redis checks say they could not look.
    assert not [r for r in results if r["name"].startswith("group ")], results
    assert by_name["consumer groups"]["detail"] == "not checked: redis is unreachable"
    assert by_name["dead letters"]["detail"] == "not checked: redis is unreachable"
    assert "missing" not in text and "start `awooop relay`" not in text
    assert by_name["postgres"]["status"] == OK  # Postgres is fine and says so
    assert [r["name"] for r in results if r["status"] == FAIL] == ["redis"]
    print(text)  # the operator's view, for the record (pytest -s)


async def test_with_postgres_unreachable_doctor_says_so(settings: Settings) -> None:
    away = msgspec.structs.replace(
        settings, database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/awooop"
    )
    code, results = doctor(away)
    assert code == 1
    by_name = {r["name"]: r for r in results}
    assert by_name["postgres"]["status"] == FAIL
    assert by_name["postgres"]["detail"].startswith("unreachable:")
    assert "AWOOOP_DATABASE_URL" in by_name["postgres"]["fix"]
    assert by_name["redis"]["status"] == OK
    assert by_name["migrations"]["detail"] == "not checked: postgres is unreachable"


async def test_a_failing_loop_is_told_from_a_stopped_one(settings: Settings, db: Database) -> None:
    await healthy(settings, db)
    async with db.platform_writes() as conn:
        # Failing: its process reports every cycle, each iteration raises.
        await conn.execute(
            "INSERT INTO awooop_loop_heartbeats (loop_name, project_id, category, interval_s, "
            "last_success_at, last_failure_at, last_error, consecutive_failures, host, pid, "
            "updated_at) VALUES ('stats_runs', '__platform__', 'platform', 10, "
            "now() - interval '10 minutes', now(), 'OperationalError: boom', 37, 'h1', 42, now())"
        )
        # Stopped: no heartbeat for 10 minutes.
        await conn.execute(
            "INSERT INTO awooop_loop_heartbeats (loop_name, project_id, category, interval_s, "
            "last_success_at, host, pid, updated_at) VALUES ('relay', '__platform__', "
            "'platform', 1, now() - interval '10 minutes', 'h2', 43, "
            "now() - interval '10 minutes')"
        )
    code, results = doctor(settings)
    assert code == 1
    by_name = {r["name"]: r for r in results}
    failing, stopped = by_name["loop stats_runs/__platform__"], by_name["loop relay/__platform__"]
    assert failing["status"] == stopped["status"] == FAIL
    assert failing["detail"].startswith("failing: 37 failed iterations"), failing
    assert "OperationalError: boom" in failing["detail"] and "h1 pid 42" in failing["detail"]
    assert "the process runs" in failing["fix"] and "BackgroundLoopFailing" in failing["fix"]
    assert "start" not in failing["fix"]
    assert stopped["detail"].startswith("stopped: no heartbeat for"), stopped
    assert "start the process" in stopped["fix"] and "BackgroundLoopStale" in stopped["fix"]


async def test_timers_past_due_are_named(settings: Settings, db: Database) -> None:
    """A wait due an hour ago (no timers loop runs): the timers line FAILs with the count and
    the lateness, and names the loop; with every wait in the future it is OK."""
    from datetime import timedelta

    from awooop.runs import signals

    await healthy(settings, db)
    runs = []
    for _ in range(2):
        run_id = uuid.uuid4()
        async with db.tenant("p1") as conn:
            now = await conn.fetchval("SELECT now()")
            await create_run(conn, factories.created(run_id=run_id, project_id="p1", at=now))
            await leases.claim(conn, run_id, "w1", 30)
            await signals.take_or_wait(
                conn, run_id, "w1", 1, step="event:go:1", name="go", match=None,
                time_out=timedelta(hours=2), due_at=None,
            )  # fmt: skip
        runs.append(run_id)
    _, results = doctor(settings)
    [timers] = [r for r in results if r["name"] == "timers"]
    assert timers["status"] == OK, timers
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_waits SET due_at = now() - interval '1 hour' WHERE run_id = $1",
            runs[0],
        )
    code, results = doctor(settings)
    [timers] = [r for r in results if r["name"] == "timers"]
    assert code == 1 and timers["status"] == FAIL, timers
    assert re.search(r"^1 wait\(s\) past due, the earliest 36\d\d s ago", timers["detail"]), timers
    assert "timers loop" in timers["fix"] and "RunsStuck" in timers["fix"]
