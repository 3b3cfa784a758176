"""The management routes' bearer tokens and scopes, on real Postgres and Redis.

Every management route refuses a missing, malformed, unknown, revoked, ingest-scoped or other
project's token with its status and code and writes nothing; the right token (the project's
``manage`` token or an ``admin`` token) is accepted, and the change records who made it in the
event's metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError, InvalidInputError
from awooop.core.events import run_stream_id
from awooop.eventlog import eventlog
from awooop.ingest import credentials
from awooop.runs import approvals, leases
from tests.support.http import app_client
from tests.support.runs import create_runs, load

P, Q = "proj-mgmt", "proj-other"
POLICY = "contracts/policy_routing/default"


@dataclass
class Tokens:
    manage: str  # P's management token
    manage_id: str
    other: str  # Q's management token
    admin: str
    admin_id: str
    ingest: str  # P's api ingest token
    revoked: str  # P's management token, revoked


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


@pytest.fixture
async def tokens(db: Database) -> Tokens:
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    _, other = await credentials.create_management_token(db, Q, "manage")
    admin_id, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    _, ingest = await credentials.create_token(db, P, "api")
    revoked_id, revoked = await credentials.create_management_token(db, P, "manage")
    assert await credentials.revoke_token(db, P, revoked_id)
    return Tokens(manage, manage_id, other, admin, admin_id, ingest, revoked)


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"authorization": f"Bearer {token}"}


async def row_counts(db: Database) -> dict[str, object]:
    async with db.platform() as conn:
        return {
            "events": await conn.fetchval("SELECT count(*) FROM awooop_events"),
            "revisions": await conn.fetchval("SELECT count(*) FROM awooop_contract_revisions"),
            "active": await conn.fetchval("SELECT count(*) FROM awooop_active_revisions"),
            "outbox": await conn.fetchval("SELECT count(*) FROM awooop_contract_outbox"),
            "approvals_used": await conn.fetchval(
                "SELECT count(*) FROM awooop_approvals WHERE used_at IS NOT NULL"
            ),
            "states": await conn.fetch(
                "SELECT run_id, status, version FROM awooop_run_state ORDER BY run_id"
            ),
        }


async def metadata_of_last_event(
    db: Database, project: str, run_id: uuid.UUID
) -> dict[str, object]:
    async with db.tenant(project) as conn:
        events = await eventlog.read_stream(conn, run_stream_id(run_id))
    return events[-1].metadata


async def failed_run(db: Database, project: str) -> uuid.UUID:
    [run_id] = await create_runs(db, project)
    await db.in_tenant(project, lambda c: leases.claim(c, run_id, "w1", 0))
    failed = await db.in_tenant(
        project,
        lambda c: leases.fail_undeliverable(c, run_id, "w2", "gave up", DeliveryLimitError.code),
    )
    assert failed is not None
    return run_id


async def requests_for(db: Database, project: str) -> list[tuple[str, str, dict[str, object]]]:
    """One request per management route, each of which would change or read ``project``."""
    [pending] = await create_runs(db, project)
    failed = await failed_run(db, project)
    [waiting] = await create_runs(db, project)
    await db.in_tenant(project, lambda c: leases.claim(c, waiting, "w1", 30))
    ticket = await db.in_tenant(
        project,
        lambda c: approvals.request(c, waiting, "w1", 1, name="go", reason="why", ttl_s=900),
    )
    base = f"/v1/projects/{project}"
    revision = str(uuid.uuid4())
    return [
        ("GET", f"{base}/runs/{pending}", {}),
        ("POST", f"{base}/runs/{pending}/cancel", {"reason": "stop"}),
        ("POST", f"{base}/runs/{failed}/retry", {}),
        ("POST", f"{base}/runs/{waiting}/approve", {"token": ticket.token}),
        ("POST", f"{base}/runs/{waiting}/reject", {"token": ticket.token}),
        ("GET", f"{base}/contracts", {}),
        ("GET", f"{base}/{POLICY}", {}),
        ("POST", f"{base}/{POLICY}/revisions", {"body": {"model": "m"}}),
        ("GET", f"{base}/{POLICY}/revisions/{revision}", {}),
        ("POST", f"{base}/{POLICY}/activate", {"revision_id": revision}),
        ("POST", f"{base}/{POLICY}/rollback", {}),
    ]


async def send(
    client: httpx.AsyncClient, method: str, url: str, body: dict[str, object], token: str | None
) -> httpx.Response:
    if method == "GET":
        return await client.get(url, headers=bearer(token))
    return await client.post(url, json=body, headers=bearer(token))


async def test_every_management_route_refuses_bad_tokens_and_writes_nothing(
    db: Database, client: httpx.AsyncClient, tokens: Tokens
) -> None:
    calls = await requests_for(db, P)
    refusals = [
        (None, 401, "E-AUTH-001"),
        ("awp_not-a-token", 401, "E-AUTH-001"),
        (f"awp_{'0' * 16}_{'x' * 43}", 401, "E-AUTH-001"),  # well-formed, unknown
        (tokens.manage[:-4] + "AAAA", 401, "E-AUTH-001"),  # right id, wrong secret
        (tokens.revoked, 401, "E-AUTH-001"),
        (tokens.ingest, 403, "E-AUTH-003"),
        (tokens.other, 403, "E-AUTH-002"),
    ]
    before = await row_counts(db)
    for method, url, body in calls:
        for token, status, code in refusals:
            response = await send(client, method, url, body, token)
            assert (response.status_code, response.json()["code"]) == (status, code), (url, token)
            assert response.json()["message"]
    assert await row_counts(db) == before


async def test_the_projects_token_and_an_admin_token_are_accepted(
    db: Database, client: httpx.AsyncClient, tokens: Tokens
) -> None:
    must_succeed = ("/cancel", "/retry", "/approve", "/revisions", "/contracts")
    for token in (tokens.manage, tokens.admin):
        for method, url, body in await requests_for(db, P):
            response = await send(client, method, url, body, token)
            # Past authorisation every route answers for itself (the random revision id is
            # 404, the reject after the approve 409 ...), never 401/403.
            assert response.status_code not in (401, 403), (url, response.text)
            if url.endswith(must_succeed) or (method == "GET" and "/runs/" in url):
                assert response.status_code in (200, 201), (url, response.text)


async def test_a_project_token_cannot_touch_another_projects_runs(
    db: Database, client: httpx.AsyncClient, tokens: Tokens
) -> None:
    [theirs] = await create_runs(db, Q)
    before = await row_counts(db)
    # Q's run through Q's path: the project in the path is not the token's.
    for url in (f"/v1/projects/{Q}/runs/{theirs}", f"/v1/projects/{Q}/runs/{theirs}/cancel"):
        response = await send(
            client, "POST" if url.endswith("cancel") else "GET", url, {}, tokens.manage
        )
        assert (response.status_code, response.json()["code"]) == (403, "E-AUTH-002")
    # Q's run through P's path: row-level security hides it, as if it did not exist.
    for suffix in ("", "/cancel"):
        url = f"/v1/projects/{P}/runs/{theirs}{suffix}"
        response = await send(client, "POST" if suffix else "GET", url, {}, tokens.manage)
        assert (response.status_code, response.json()["code"]) == (404, "E-RUN-003")
    assert await row_counts(db) == before
    assert (await load(db, Q, theirs)).status == "PENDING"
    # Q's own token (and an admin token) may.
    done = await client.post(
        f"/v1/projects/{Q}/runs/{theirs}/cancel", json={}, headers=bearer(tokens.other)
    )
    assert done.status_code == 200 and done.json()["status"] == "CANCELLED"


async def test_changes_record_the_token_as_actor_in_the_event_metadata(
    db: Database, client: httpx.AsyncClient, tokens: Tokens
) -> None:
    [run_id] = await create_runs(db, P)
    cancelled = await client.post(
        f"/v1/projects/{P}/runs/{run_id}/cancel",
        json={"actor": "alice", "reason": "stop"},
        headers=bearer(tokens.manage),
    )
    assert cancelled.status_code == 200
    assert (await metadata_of_last_event(db, P, run_id))[
        "actor"
    ] == f"manage-token:{tokens.manage_id}"
    async with db.tenant(P) as conn:
        last = (await eventlog.read_stream(conn, run_stream_id(run_id)))[-1].decode()
    assert last.actor == "alice"  # the person named in the body, in the event itself

    failed = await failed_run(db, P)
    retried = await client.post(
        f"/v1/projects/{P}/runs/{failed}/retry", json={"attempts": 2}, headers=bearer(tokens.admin)
    )
    assert retried.status_code == 200 and retried.json()["status"] == "PENDING"
    assert retried.json()["max_attempts"] == retried.json()["attempt_count"] + 2
    meta = await metadata_of_last_event(db, P, failed)
    assert meta["actor"] == f"admin-token:{tokens.admin_id}"

    created = await client.post(
        f"/v1/projects/{P}/{POLICY}/revisions",
        json={"body": {"model": "m"}},
        headers=bearer(tokens.admin),
    )
    async with db.tenant(P) as conn:
        [event] = await eventlog.read_stream(conn, f"revision-{P}/policy_routing/default")
    assert created.status_code == 201
    assert event.metadata["actor"] == f"admin-token:{tokens.admin_id}"

    too_many = await client.post(
        f"/v1/projects/{P}/runs/{failed}/retry",
        json={"attempts": 10**9},
        headers=bearer(tokens.admin),
    )
    assert (too_many.status_code, too_many.json()["code"]) == (400, "E-INPUT-001")


async def test_token_scopes_are_checked_at_creation(db: Database) -> None:
    with pytest.raises(InvalidInputError):
        await credentials.create_management_token(db, P, "admin")
    with pytest.raises(InvalidInputError):
        await credentials.create_management_token(db, PLATFORM_PROJECT, "manage")
    with pytest.raises(InvalidInputError):
        await credentials.create_management_token(db, P, "ingest")
    with pytest.raises(InvalidInputError):
        await credentials.create_token(db, PLATFORM_PROJECT, "api")
    # The table holds the same rules (migration 0070), whatever writes to it.
    async with db.platform_writes() as conn:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO awooop_api_tokens (token_id, project_id, scope, token_hash) "
                "VALUES ('0123456789abcdef', $1, 'admin', $2)",
                P,
                "0" * 64,
            )
    listed = await credentials.list_tokens(db, PLATFORM_PROJECT)
    assert listed == []
