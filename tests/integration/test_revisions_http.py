"""The contract revision routes under /v1/projects/{project_id}/contracts (real Postgres)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.http.app import create_app
from awooop.ingest import credentials
from awooop.services import Services

BASE = "/v1/projects/p1/contracts"
POLICY = BASE + "/policy_routing/default"


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    small = msgspec.structs.replace(settings, http_max_body_bytes=2048)
    services = await Services.open(small, db_pool_size=2)
    app = create_app(services)
    transport = httpx.ASGITransport(app=app)
    # The contract routes are management routes: an admin token acts on p1 and p2 alike.
    _, admin = await credentials.create_management_token(services.db, PLATFORM_PROJECT, "admin")
    async with httpx.AsyncClient(
        transport=transport, base_url="http://awooop", headers={"authorization": f"Bearer {admin}"}
    ) as http:
        yield http
    await services.close()


async def create(client: httpx.AsyncClient, body: object, path: str = POLICY) -> str:
    response = await client.post(path + "/revisions", json={"body": body})
    assert response.status_code == 201, response.text
    revision_id: str = response.json()["revision_id"]
    return revision_id


async def active(client: httpx.AsyncClient, path: str = POLICY) -> str | None:
    response = await client.get(path)
    assert response.status_code == 200
    value: str | None = response.json()["active_revision_id"]
    return value


async def test_create_show_activate_list_rollback(client: httpx.AsyncClient) -> None:
    r1 = await create(client, {"model": "a"})
    r2 = await create(client, {"model": "b"})
    shown = (await client.get(f"{POLICY}/revisions/{r1}")).json()
    assert (shown["body"], shown["body_hash"][:7], shown["active"]) == (
        {"model": "a"},
        "sha256:",
        False,
    )

    first = await client.post(
        POLICY + "/activate", json={"revision_id": r1, "expected_revision_id": None}
    )
    assert first.status_code == 200, first.text
    assert (first.json()["old_revision_id"], first.json()["new_revision_id"]) == (None, r1)
    second = await client.post(POLICY + "/activate", json={"revision_id": r2})
    assert second.json()["new_revision_id"] == r2 and second.json()["changed"] is True
    assert await active(client) == r2

    listed = (await client.get(BASE)).json()["contracts"]
    assert [
        (c["contract_family"], c["contract_id"], c["active_revision_id"], c["revisions"])
        for c in listed
    ] == [("policy_routing", "default", r2, 2)]
    back = await client.post(POLICY + "/rollback", json={})
    assert back.status_code == 200, back.text
    assert (back.json()["old_revision_id"], back.json()["new_revision_id"]) == (r2, r1)
    assert await active(client) == r1


async def test_activation_errors_are_clear_4xx_and_leave_the_pointer(
    client: httpx.AsyncClient,
) -> None:
    r1 = await create(client, {"model": "a"})
    r2 = await create(client, {"model": "b"})
    theirs = await create(
        client, {"model": "x"}, path="/v1/projects/p2/contracts/policy_routing/default"
    )
    other_contract = await create(client, {"model": "y"}, path=BASE + "/policy_routing/other")
    await client.post(POLICY + "/activate", json={"revision_id": r1})
    cases = [
        ({"revision_id": str(uuid.uuid4())}, 404, "E-REVISION-001"),
        ({"revision_id": theirs}, 404, "E-REVISION-001"),
        ({"revision_id": other_contract}, 422, "E-REVISION-004"),
        ({"revision_id": r2, "expected_revision_id": r2}, 409, "E-REVISION-002"),
        ({"revision_id": r2, "expected_revision_id": None}, 409, "E-REVISION-002"),
        ({"revision_id": "not-a-uuid"}, 400, "E-INPUT-001"),
        ({"revision": r2}, 400, "E-INPUT-001"),
    ]
    for payload, status, code in cases:
        response = await client.post(POLICY + "/activate", json=payload)
        assert (response.status_code, response.json()["code"]) == (status, code), payload
    assert await active(client) == r1
    assert await active(client, "/v1/projects/p2/contracts/policy_routing/default") is None


async def test_bad_bodies_are_refused(client: httpx.AsyncClient) -> None:
    cases = [
        (b"not json", 400, "E-INPUT-001"),
        (b'{"body": [1, 2]}', 400, "E-INPUT-001"),
        (b'{"body": {"model": 3}}', 422, "E-REVISION-006"),
        (b'{"body": {}, "extra": 1}', 400, "E-INPUT-001"),
        (b'{"body": {"x": "' + b"a" * 4096 + b'"}}', 413, "E-INPUT-003"),
    ]
    for raw, status, code in cases:
        response = await client.post(
            POLICY + "/revisions", content=raw, headers={"content-type": "application/json"}
        )
        assert (response.status_code, response.json()["code"]) == (status, code), raw[:40]
    bad_retry = {"retry": {"tools": {"search": {"max_attempts": 0}}}}
    refused = await client.post(BASE + "/agent/default/revisions", json={"body": bad_retry})
    assert (refused.status_code, refused.json()["code"]) == (422, "E-REVISION-006")
    assert refused.json()["details"] == {"path": "retry.tools.search"}
    bad_name = await client.post(BASE + "/Bad Family/x/revisions", json={"body": {}})
    assert (bad_name.status_code, bad_name.json()["code"]) == (400, "E-INPUT-001")
    assert (await client.get(BASE)).json()["contracts"] == []


async def test_show_errors(client: httpx.AsyncClient) -> None:
    r1 = await create(client, {"model": "a"})
    assert (await client.get(f"{POLICY}/revisions/{uuid.uuid4()}")).status_code == 404
    assert (await client.get(f"{POLICY}/revisions/nonsense")).status_code == 404
    assert (await client.get(f"{BASE}/policy_routing/other/revisions/{r1}")).status_code == 404
    nothing = await client.post(POLICY + "/rollback", json={})
    assert (nothing.status_code, nothing.json()["code"]) == (404, "E-REVISION-003")
