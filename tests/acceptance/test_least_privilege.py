"""No superuser needed at run time (docs/operations.md, "Tenant isolation", R-43): every process
of the runtime (``awooop up``: HTTP ingest, every loop, the relay, projectors, a worker; the
producer library; the CLI) works logged in as a role that is only a member of ``awooop_app``
and ``awooop_platform``; a producer service logged in as a login of its own, bound to the
project by ``awooop tenants grant`` (which only the owner may run), submits a run in its own
transaction that the runtime then executes. Schema changes stay with the owner: such a role
may run ``awooop migrate`` as a check (nothing pending: no DDL), is refused a pending migration
with E-MIGRATE-002, and is refused a replay with E-REPLAY-004, each writing nothing."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import MigrationPrivilegeError
from awooop.core.migrate import MIGRATIONS_DIR, migrate
from awooop.demo.servers import free_port
from tests.support.handlers import read_effects
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, cli

LOGIN = "awooop_test_runtime"
PASSWORD = "awooop-test-runtime"
P = "proj-nosu"

CREATE_LOGIN = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{LOGIN}') THEN
        BEGIN
            CREATE ROLE {LOGIN} LOGIN PASSWORD '{PASSWORD}'
                NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS IN ROLE awooop_app, awooop_platform;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created at the same moment by another test session
        END;
    END IF;
END
$$
"""


def as_login(url: str, role: str = LOGIN, password: str = PASSWORD) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


@pytest.fixture
async def login(settings: Settings) -> Settings:
    """The test's settings, logged in as the least-privilege role."""
    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute(CREATE_LOGIN)
        assert not await conn.fetchval(
            "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = $1", LOGIN
        )
    finally:
        await conn.close()
    return msgspec.structs.replace(
        settings,
        database_url=as_login(settings.database_url),
        lease_ttl_s=5.0,
        heartbeat_interval_s=1.0,
        approval_resolver_interval_s=0.5,
    )


async def statuses(db: Database) -> dict[str, int]:
    async with db.platform() as conn:
        rows = await conn.fetch("SELECT status, count(*) AS n FROM awooop_run_state GROUP BY 1")
    return {r["status"]: r["n"] for r in rows}


async def readyz(client: httpx.AsyncClient) -> int:
    return (await client.get("/readyz")).status_code


async def shadow_tables(db: Database) -> list[str]:
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE '%shadow%'"
        )
    return [r["relname"] for r in rows]


@pytest.fixture
async def service_login(settings: Settings) -> AsyncIterator[str]:
    """A producer service's own login role (no runtime role); dropped afterwards."""
    role = f"awooop_t_svc_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
        yield role
    finally:
        await conn.execute(f"DROP ROLE IF EXISTS {role}")
        await conn.close()


@pytest.mark.connections(40)
async def test_every_process_works_without_superuser(
    login: Settings, settings: Settings, db: Database, tmp_path: Path, service_login: str
) -> None:
    owner_url = settings.database_url
    effects = str(tmp_path / "effects.jsonl")
    created = cli(login, "tokens", "create", P, "--scope", "ingest", "--channel", "api")
    assert created.returncode == 0, created.stderr
    # Binding a producer login is the owner's: the runtime's login is refused, writing nothing.
    refused_grant = cli(login, "tenants", "grant", service_login, P)
    assert refused_grant.returncode == 1 and "E-TENANT-001" in refused_grant.stderr
    granted = cli(
        msgspec.structs.replace(login, database_url=owner_url), "tenants", "grant", service_login, P
    )
    assert granted.returncode == 0, granted.stderr
    listed = cli(login, "tenants", "list", "--json")  # the platform role may read bindings
    assert msgspec.json.decode(listed.stdout) == [
        {"role_name": service_login, "projects": [P], "role_exists": True, "producer": True}
    ], listed.stdout + listed.stderr
    token = created.stdout.split()[0]
    port = free_port()
    up = WorkerProcess(
        login,
        tmp_path,
        "up",
        command=("up", "--workers", "1", "--handler", "tests.support.handlers:journaled"),
        env={"AWOOOP_TEST_SIDE_EFFECTS": effects, "AWOOOP_HTTP_PORT": str(port)},
    ).start()
    producer_db = await Database.open(login.database_url, max_size=2)
    try:
        for i in range(5):  # the producer library
            payload = {"approval": True} if i == 0 else {}
            event = producer.ChannelEvent("api", f"delivery-{i}", payload)
            await producer.submit(producer_db, P, event, settings=login)
        # The producer service, on its own login, inside its own transaction.
        service = await asyncpg.connect(as_login(owner_url, service_login, f"pw-{service_login}"))
        await producer.init_connection(service)  # as docs/ingest.md says
        try:
            async with service.transaction():
                await producer.set_tenant(service, P)
                event = producer.ChannelEvent("api", "from-the-service", {})
                assert (await producer.submit(service, P, event, settings=login)).created
        finally:
            await service.close()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            await eventually(
                lambda: readyz(client),
                equals=200,
                ignoring=(httpx.TransportError,),
                what="awooop up answers /readyz",
            )
            for i in range(5, 10):  # HTTP, each delivery twice
                headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"delivery-{i}"}
                path = f"/v1/projects/{P}/channels/api"
                first = await client.post(path, json={"text": "hi"}, headers=headers)
                assert first.status_code == 202, first.text
                repeat = await client.post(path, json={"text": "hi"}, headers=headers)
                assert repeat.json()["code"] == "E-IDEMPOTENT-001", repeat.text
        await eventually(
            lambda: statuses(db),
            equals={"COMPLETED": 10, "WAITING_APPROVAL": 1},
            timeout_s=60,
            what="the run states",
        )
        [ticket] = read_effects(effects + ".tickets")
        approved = cli(login, "runs", "approve", P, ticket["run_id"], "--token", ticket["token"])
        assert approved.returncode == 0, approved.stderr
        await eventually(
            lambda: statuses(db), equals={"COMPLETED": 11}, what="the run states after approval"
        )

        await asyncio.sleep(1.5)  # every loop of `up` has reported a heartbeat
        doctor = await asyncio.to_thread(cli, login, "doctor")
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert f"{LOGIN}: no superuser, no BYPASSRLS" in doctor.stdout, doctor.stdout

        refused = await asyncio.to_thread(cli, login, "replay", "run_timeline")
        assert refused.returncode == 1
        assert "E-REPLAY-004" in refused.stderr, refused.stderr
        assert await shadow_tables(db) == []
    finally:
        await producer_db.close()
        up.stop()
    assert up.wait() == 0, up.logs()[-3000:]
    assert "Traceback" not in up.logs(), up.logs()[-3000:]
    # The views the projectors built as the login role equal the log (replayed by the owner).
    verified = await asyncio.to_thread(
        cli, msgspec.structs.replace(login, database_url=owner_url), "replay", "run_timeline"
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "verify: no difference" in verified.stdout


async def test_migrate_as_the_login_role_checks_and_writes_nothing(
    login: Settings, settings: Settings, db: Database, tmp_path: Path
) -> None:
    assert await migrate(login.database_url) == []  # everything applied: no DDL, no error

    pending = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, pending)
    table = f"awooop_probe_{uuid.uuid4().hex[:8]}"
    (pending / "9999_probe.sql").write_text(f"-- phase: expand\nCREATE TABLE {table} (id int);\n")
    with pytest.raises(MigrationPrivilegeError) as refused:
        await migrate(login.database_url, pending)
    assert refused.value.code == "E-MIGRATE-002"
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT to_regclass($1)", table) is None
        assert not await conn.fetchval(
            "SELECT count(*) FROM awooop_schema_migrations WHERE name = '9999_probe.sql'"
        )
    assert await migrate(settings.database_url, pending) == ["9999_probe.sql"]  # the owner may
