"""A producer service's login bound to its projects (R-43, migrations/0090_tenant_bindings.sql).

Each test logs in as a real login role created for it (``CREATE ROLE ... LOGIN``; roles are
server-wide, so each name is unique and the role is dropped afterwards), bound to ``shop`` by
:func:`awooop.ingest.tenants.grant` as the owner. Whatever that login sets, it cannot see or write
``victim``'s rows, cannot read or write any credential, cannot reach the platform, and cannot
make a token the management API accepts; the producer library still works for ``shop`` inside
the login's own transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError, TenantAdminError, TenantNotGrantedError
from awooop.core.events import run_stream_id
from awooop.ingest import auth, credentials, tenants
from awooop.producer import ChannelEvent, DomainEvent
from tests.support import tenant_rows
from tests.support.http import app_client
from tests.support.ingest import counts
from tests.support.logins import Login, as_role, create_login, drop_login

SHOP, VICTIM = "shop", "victim"
SETTINGS = ("victim", PLATFORM_PROJECT, "shop", "")
CREDENTIAL_TABLES = ("awooop_channels", "awooop_api_tokens")
TENANT_TABLES = """
SELECT c.table_name FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema = 'public' AND c.column_name = 'project_id' AND t.table_type = 'BASE TABLE'
ORDER BY 1
"""
SET = "SELECT set_config('awooop.project_id', $1, $2)"


@pytest.fixture
async def shop_login(database_url: str, db: Database) -> AsyncIterator[Login]:
    """A login bound to shop; victim and shop hold rows in every tenant table, victim a
    channel secret and tokens, the platform an admin token."""
    role = f"awooop_t_{uuid.uuid4().hex[:12]}"
    await create_login(database_url, role)
    try:
        owner = await asyncpg.connect(database_url)
        try:
            assert await tenants.grant(owner, role, [SHOP]) == [SHOP]
        finally:
            await owner.close()
        for project in (VICTIM, SHOP):
            await tenant_rows.seed_project(db, project)
        await credentials.set_secret(db, VICTIM, "gitea", "victim-webhook-secret")
        await credentials.create_token(db, VICTIM, "api")
        await credentials.create_management_token(db, VICTIM, "manage")
        await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
        yield Login(role, as_role(database_url, role))
    finally:
        await drop_login(database_url, role)


async def tenant_tables(db: Database) -> list[str]:
    async with db.platform() as conn:
        return [str(r["table_name"]) for r in await conn.fetch(TENANT_TABLES)]


async def visible_projects(conn: Any, table: str) -> set[str] | None:
    """The projects of ``table`` the connection sees (None: refused outright)."""
    try:
        async with conn.transaction():
            rows = await conn.fetch(
                f"SELECT DISTINCT project_id FROM {tenant_rows.quote_ident(table)}"
            )
    except asyncpg.InsufficientPrivilegeError:
        return None
    return {r["project_id"] for r in rows}


async def refused(conn: Any, statement: str, *args: Any) -> bool:
    try:
        async with conn.transaction():
            await conn.execute(statement, *args)
    except asyncpg.InsufficientPrivilegeError:
        return True
    return False


async def test_whatever_it_sets_a_producer_sees_only_its_own_projects_rows(
    shop_login: Login, db: Database
) -> None:
    tables = await tenant_tables(db)
    problems: list[str] = []
    conn = await shop_login.connect()
    try:
        for setting in SETTINGS:
            for local in (True, False):
                await conn.execute(SET, setting, local)
                async with conn.transaction():
                    await conn.execute(SET, setting, local)
                    for table in tables:
                        seen = await visible_projects(conn, table)
                        allowed = {SHOP} if setting == SHOP else set()
                        if seen is not None and not seen <= allowed:
                            problems.append(f"{table} under {setting!r}: sees {sorted(seen)}")
        # Credentials and the platform's own tables: refused outright, whatever is set.
        await conn.execute(SET, VICTIM, False)
        for statement in (
            "SELECT secret FROM awooop_channels",
            "SELECT * FROM awooop_channels",
            "SELECT token_hash FROM awooop_api_tokens",
            "SELECT count(*) FROM awooop_api_tokens",
            "SELECT * FROM awooop_tenant_grants",
            "SELECT * FROM awooop_approvals",
            "SELECT * FROM awooop_projects",
            "SELECT * FROM awooop_relay_cursor",
            "SELECT * FROM awooop_leaders",
            "SELECT * FROM awooop_loop_heartbeats",
        ):
            if not await refused(conn, statement):
                problems.append(f"not refused: {statement}")
        # Its own channel's non-secret settings are readable (the producer needs the TTL).
        await conn.execute(SET, SHOP, False)
        assert await conn.fetchval("SELECT count(*) FROM awooop_channels") >= 1
        assert await conn.fetchval("SELECT awooop_my_projects()") == [SHOP]
        # Its own bindings only, whatever its WHERE clause (the view is a security barrier).
        assert await conn.fetchval("SELECT array_agg(project) FROM awooop_my_grants") == [SHOP]
        # It cannot become one of the runtime's roles, nor someone else.
        for statement in (
            "SET ROLE awooop_app",
            "SET ROLE awooop_platform",
            "SET SESSION AUTHORIZATION postgres",
            "ALTER TABLE awooop_run_state NO FORCE ROW LEVEL SECURITY",
            "DROP POLICY tenant_binding ON awooop_run_state",
            f"INSERT INTO awooop_tenant_grants (role_name, project) VALUES "
            f"('{shop_login.role}', '{VICTIM}')",
        ):
            try:
                await conn.execute(statement)
                problems.append(f"allowed: {statement}")
            except asyncpg.PostgresError:
                pass
    finally:
        await conn.close()
    assert not problems, "; ".join(problems)
    # The owner's view: the victim's rows were there all along.
    async with db.platform() as owner:
        for table in ("awooop_run_state", "awooop_events", "awooop_channels", "awooop_api_tokens"):
            assert await owner.fetchval(
                f"SELECT count(*) FROM {table} WHERE project_id = $1", VICTIM
            ), table


async def test_no_tenant_role_writes_a_token_or_a_secret(shop_login: Login, db: Database) -> None:
    token_id, _, token_hash = auth.new_token()
    writes = (
        (
            "INSERT INTO awooop_api_tokens (token_id, project_id, scope, token_hash) "
            "VALUES ($1, $2, 'admin', $3)",
            token_id,
            PLATFORM_PROJECT,
            token_hash,
        ),
        (
            "INSERT INTO awooop_api_tokens (token_id, project_id, scope, token_hash) "
            "VALUES ($1, $2, 'manage', $3)",
            token_id,
            SHOP,
            token_hash,
        ),
        ("UPDATE awooop_api_tokens SET token_hash = $1", token_hash),
        ("UPDATE awooop_api_tokens SET revoked_at = NULL",),
        ("DELETE FROM awooop_api_tokens",),
        (
            "INSERT INTO awooop_channels (project_id, channel_type, secret) "
            "VALUES ($1, 'line', 'x')",
            SHOP,
        ),
        ("UPDATE awooop_channels SET secret = 'mine'",),
        ("UPDATE awooop_channels SET dedupe_ttl_s = 1",),
        ("DELETE FROM awooop_channels",),
    )
    before = await credential_rows(db)
    problems: list[str] = []
    conn = await shop_login.connect()
    try:
        for setting in SETTINGS:
            await conn.execute(SET, setting, False)
            for statement, *args in writes:
                if not await refused(conn, statement, *args):
                    problems.append(f"producer under {setting!r}: {statement}")
    finally:
        await conn.close()
    # The runtime's own tenant role is refused the same writes (management writes go through
    # the platform role: awooop.ingest.credentials).
    for setting in (PLATFORM_PROJECT, SHOP):
        async with db.tenant(setting) as app:
            for statement, *args in writes:
                if not await refused(app, statement, *args):
                    problems.append(f"awooop_app under {setting!r}: {statement}")
    assert not problems, "; ".join(problems)
    assert await credential_rows(db) == before


async def credential_rows(db: Database) -> list[Any]:
    async with db.platform() as conn:
        return [
            list(await conn.fetch(f"SELECT * FROM {t} ORDER BY 1, 2")) for t in CREDENTIAL_TABLES
        ]


async def test_submitting_for_another_project_is_refused_with_a_code_and_writes_nothing(
    shop_login: Login, db: Database
) -> None:
    before = await counts(db)
    conn = await shop_login.connect()
    try:
        async with conn.transaction():
            await producer.set_tenant(conn, VICTIM)
            for attempt in (
                producer.submit(conn, VICTIM, ChannelEvent("api", "steal-1", {"x": 1})),
                producer.submit_many(conn, VICTIM, [ChannelEvent("api", "steal-2", {})]),
                producer.emit(conn, VICTIM, DomainEvent("orders", "OrderPaid", {"x": 1})),
            ):
                with pytest.raises(TenantNotGrantedError) as refusal:
                    await attempt
                assert refusal.value.code == "E-INGEST-003"
            # The transaction is still usable: the refusal came before any write.
            assert await conn.fetchval("SELECT 1") == 1
        # Written by hand, past the library, the policy refuses the row.
        async with conn.transaction():
            await producer.set_tenant(conn, VICTIM)
            assert await refused(
                conn,
                "INSERT INTO awooop_channel_event_dedupe "
                "(project_id, channel_type, provider_event_id, window_start, run_id, expires_at) "
                "VALUES ($1, 'api', 'steal-3', awooop_dedupe_window(now()), $2, "
                "now() + interval '1 day')",
                VICTIM,
                uuid.uuid4(),
            )
            assert await conn.fetchval("SELECT count(*) FROM awooop_run_state") == 0
    finally:
        await conn.close()
    assert await counts(db) == before


async def test_submitting_for_its_own_project_works_in_its_transaction_and_rolls_back(
    shop_login: Login, db: Database
) -> None:
    before = await counts(db)

    class Abort(Exception):
        pass

    conn = await shop_login.connect()
    try:

        async def submit_then_abort() -> None:
            async with conn.transaction():
                await producer.set_tenant(conn, SHOP)
                result = await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {}))
                assert result.created
                raise Abort

        with pytest.raises(Abort):
            await submit_then_abort()
        assert await counts(db) == before

        async with conn.transaction():
            await producer.set_tenant(conn, SHOP)
            result = await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {"n": 1}))
            emitted = await producer.emit(conn, SHOP, DomainEvent("order-1", "OrderPaid", {}))
        async with conn.transaction():
            await producer.set_tenant(conn, SHOP)
            again = await producer.submit(conn, SHOP, ChannelEvent("api", "order-1", {"n": 1}))
            status = await conn.fetchval(
                "SELECT status FROM awooop_run_state WHERE run_id = $1", result.run_id
            )
    finally:
        await conn.close()
    assert result.created and not again.created and again.run_id == result.run_id
    assert status == "PENDING"
    async with db.platform() as owner:
        assert (
            await owner.fetchval(
                "SELECT project_id FROM awooop_run_state WHERE run_id = $1", result.run_id
            )
            == SHOP
        )
        assert await owner.fetchval(
            "SELECT count(*) FROM awooop_events WHERE stream_id = $1", emitted.stream_id
        )


async def test_a_producer_cannot_make_a_token_the_management_api_accepts(
    shop_login: Login, settings: Settings, db: Database
) -> None:
    forged: list[str] = []
    conn = await shop_login.connect()
    try:
        for setting in SETTINGS:
            await conn.execute(SET, setting, False)
            for project, scope in (
                (PLATFORM_PROJECT, "admin"),
                (SHOP, "manage"),
                (VICTIM, "manage"),
            ):
                token_id, token, token_hash = auth.new_token()
                forged.append(token)
                await refused(
                    conn,
                    "INSERT INTO awooop_api_tokens (token_id, project_id, scope, token_hash) "
                    "VALUES ($1, $2, $3, $4)",
                    token_id,
                    project,
                    scope,
                    token_hash,
                )
    finally:
        await conn.close()
    async with app_client(settings, db) as client:
        for token in forged:
            for project in (SHOP, VICTIM):
                answer = await client.get(
                    f"/v1/projects/{project}/runs/{uuid.uuid4()}",
                    headers={"authorization": f"Bearer {token}"},
                )
                assert (answer.status_code, answer.json()["code"]) == (401, "E-AUTH-001")


async def test_only_a_login_that_cannot_leave_the_binding_is_bound(
    database_url: str, db: Database
) -> None:
    """Roles that could escape the policy are refused a binding, and nothing is written."""
    suffix = uuid.uuid4().hex[:10]
    cases = {
        f"awooop_t_nologin_{suffix}": ("NOLOGIN",),
        f"awooop_t_bypass_{suffix}": ("BYPASSRLS",),
        f"awooop_t_createrole_{suffix}": ("CREATEROLE",),
        f"awooop_t_app_{suffix}": ("IN ROLE awooop_app",),
        f"awooop_t_platform_{suffix}": ("IN ROLE awooop_platform",),
    }
    owner = await asyncpg.connect(database_url)
    try:
        for role, attributes in cases.items():
            await create_login(database_url, role, *attributes)
        for role in cases:
            with pytest.raises(InvalidInputError):
                await tenants.grant(owner, role, [SHOP])
        with pytest.raises(InvalidInputError):
            await tenants.grant(owner, f"awooop_t_missing_{suffix}", [SHOP])
        with pytest.raises(InvalidInputError):
            await tenants.grant(owner, "awooop_app", [SHOP])
        assert await tenants.list_bindings(owner) == []
    finally:
        await owner.close()
        for role in cases:
            await drop_login(database_url, role)


async def test_grant_list_and_revoke(database_url: str, db: Database) -> None:
    role = f"awooop_t_{uuid.uuid4().hex[:12]}"
    await create_login(database_url, role)
    owner = await asyncpg.connect(database_url)
    try:
        with pytest.raises(InvalidInputError):
            await tenants.grant(owner, role, [PLATFORM_PROJECT])
        assert await tenants.grant(owner, role, [SHOP, "other"]) == [SHOP, "other"]
        assert await tenants.grant(owner, role, [SHOP]) == []
        [binding] = await tenants.list_bindings(owner)
        assert (binding.role_name, binding.projects, binding.producer) == (
            role,
            ["other", SHOP],
            True,
        )
        assert await tenants.revoke(owner, role, [SHOP]) == 1
        assert await owner.fetchval("SELECT pg_has_role($1, 'awooop_producer', 'MEMBER')", role)
        assert await tenants.revoke(owner, role, ["other"]) == 1
        assert await tenants.list_bindings(owner) == []
        assert not await owner.fetchval("SELECT pg_has_role($1, 'awooop_producer', 'MEMBER')", role)
    finally:
        await owner.close()
        await drop_login(database_url, role)


async def test_an_open_session_sees_each_grant_and_revoke_at_its_next_call(
    shop_login: Login, database_url: str
) -> None:
    """The binding's functions keep their plans for the session (migrations/0114): the
    answers are still read afresh on each call."""
    conn = await shop_login.connect()
    owner = await asyncpg.connect(database_url)
    try:

        async def binding() -> tuple[list[str], bool, bool]:
            row = await conn.fetchrow(
                "SELECT awooop_my_projects() AS mine, awooop_tenant_bound($1) AS shop, "
                "awooop_tenant_bound($2) AS other",
                SHOP,
                "other",
            )
            return list(row["mine"]), row["shop"], row["other"]

        for _ in range(3):  # past the calls after which a session's plans are cached
            assert await binding() == ([SHOP], True, False)
        assert await tenants.grant(owner, shop_login.role, ["other"]) == ["other"]
        assert await binding() == (["other", SHOP], True, True)
        assert await tenants.revoke(owner, shop_login.role, [SHOP]) == 1
        assert await binding() == (["other"], False, True)
        async with owner.transaction():  # the tables' owner is not bound
            assert await owner.fetchval("SELECT awooop_tenant_bound($1)", "anything")
    finally:
        await conn.close()
        await owner.close()


async def test_a_revoke_refuses_the_next_submit_though_its_configuration_is_cached(
    shop_login: Login, database_url: str, db: Database, settings: Settings
) -> None:
    cached = msgspec.structs.replace(settings, ingest_config_cache_s=60.0)
    conn = await shop_login.connect()
    owner = await asyncpg.connect(database_url)
    try:

        async def submit(key: str) -> None:
            async with conn.transaction():
                await producer.set_tenant(conn, SHOP)
                try:
                    await producer.submit(conn, SHOP, ChannelEvent("api", key, {}), settings=cached)
                finally:
                    assert await conn.fetchval("SELECT 1") == 1  # usable, refused or not

        await submit("before-revoke")
        assert await tenants.grant(owner, shop_login.role, ["other"]) == ["other"]
        assert await tenants.revoke(owner, shop_login.role, [SHOP]) == 1
        before = await counts(db)
        with pytest.raises(TenantNotGrantedError) as refusal:
            await submit("after-revoke")
        assert refusal.value.code == "E-INGEST-003"
        assert await counts(db) == before
    finally:
        await conn.close()
        await owner.close()


async def test_only_the_owner_binds_logins(database_url: str, db: Database) -> None:
    """The runtime's own login (a member of awooop_app and awooop_platform, no superuser) may
    read the bindings but not make one: E-TENANT-001, nothing written."""
    runtime, service = (f"awooop_t_{uuid.uuid4().hex[:12]}" for _ in range(2))
    await create_login(database_url, runtime, "IN ROLE awooop_app, awooop_platform")
    await create_login(database_url, service)
    try:
        conn = await Login(runtime, as_role(database_url, runtime)).connect()
        try:
            with pytest.raises(TenantAdminError) as refusal:
                await tenants.grant(conn, service, [SHOP])
            assert refusal.value.code == "E-TENANT-001"
            assert await tenants.list_bindings(conn) == []
        finally:
            await conn.close()
        async with db.platform() as owner:
            assert not await owner.fetchval(
                "SELECT pg_has_role($1, 'awooop_producer', 'MEMBER')", service
            )
    finally:
        await drop_login(database_url, runtime)
        await drop_login(database_url, service)


async def test_a_producer_cannot_move_its_own_runs_on_by_hand(
    shop_login: Login, db: Database
) -> None:
    """Run progress is the runtime's: a producer writes new runs, their RunCreated and domain
    events, nothing else, even in its own project."""
    conn = await shop_login.connect()
    try:
        async with conn.transaction():
            await producer.set_tenant(conn, SHOP)
            run = await producer.submit(conn, SHOP, ChannelEvent("api", "mine-1", {}))
        stream = run_stream_id(run.run_id)
        async with db.platform_writes() as owner:
            row = await owner.fetchval(
                "SELECT to_jsonb(s) FROM awooop_run_state s WHERE run_id = $1", run.run_id
            )
        before = await counts(db)
        await conn.execute(SET, SHOP, False)
        for statement, *args in (
            (
                "INSERT INTO awooop_events (event_id, stream_id, version, project_id, "
                "event_type, data) VALUES ($1, $2, 2, $3, 'ApprovalGranted', '{}')",
                uuid.uuid4(),
                stream,
                SHOP,
            ),
            ("UPDATE awooop_run_state SET status = 'COMPLETED' WHERE run_id = $1", run.run_id),
            ("DELETE FROM awooop_run_state WHERE run_id = $1", run.run_id),
            ("DELETE FROM awooop_events WHERE stream_id = $1", stream),
            (
                "INSERT INTO awooop_run_state SELECT * FROM jsonb_populate_record("
                "NULL::awooop_run_state, $1::jsonb || jsonb_build_object("
                "'run_id', gen_random_uuid(), 'status', 'COMPLETED'))",
                row,
            ),
        ):
            assert await refused(conn, statement, *args), statement
        moved = await conn.execute(
            "UPDATE awooop_event_streams SET version = version + 1 WHERE stream_id = $1", stream
        )
        assert moved == "UPDATE 0"
    finally:
        await conn.close()
    assert await counts(db) == before
