"""The concurrency limit routes and ``awooop projects limit|unlimit|limits`` on real Postgres: a
project's manage token sets and drops its own project's limits only, a read token sees them and
the busiest keys, a bad expression is refused before anything is stored."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.runs import concurrency
from tests.support.http import app_client
from tests.support.workers import cli

P, Q = "proj-a", "proj-b"


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_project_token_sets_and_drops_its_own_limits(
    client: httpx.AsyncClient, db: Database, settings: Settings
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    _, theirs = await credentials.create_management_token(db, Q, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    body = {"contract": "default", "key": "input.customer", "max": "2", "depth_cap": 10}

    refused = await client.post(f"/v1/projects/{Q}/limits", json=body, headers=bearer(mine))
    assert (refused.status_code, refused.json()["code"]) == (403, "E-AUTH-002")
    read_only = await client.post(f"/v1/projects/{P}/limits", json=body, headers=bearer(reader))
    assert (read_only.status_code, read_only.json()["code"]) == (403, "E-AUTH-004")
    bad = await client.post(
        f"/v1/projects/{P}/limits", json={**body, "key": "input."}, headers=bearer(mine)
    )
    assert (bad.status_code, bad.json()["code"]) == (400, "E-INPUT-001")
    whole = await client.post(
        f"/v1/projects/{P}/limits", json={"key": "input.customer"}, headers=bearer(mine)
    )
    assert (whole.status_code, whole.json()["code"]) == (400, "E-INPUT-001")
    assert await db.in_platform(lambda c: concurrency.listing(c, None)) == []

    made = await client.post(f"/v1/projects/{P}/limits", json=body, headers=bearer(mine))
    assert made.status_code == 200, made.text
    got = made.json()
    assert (got["scope"], got["scope_key"], got["key_expr"], got["depth_cap"]) == (
        "contract",
        "default",
        "input.customer",
        10,
    )
    assert got["set_by"].startswith("manage-token:")

    event = producer.ChannelEvent("api", "k1", {"customer": "c-9"})
    await producer.submit(db, P, event, settings=settings)
    listed = await client.get(f"/v1/projects/{P}/limits?top=5", headers=bearer(reader))
    assert listed.status_code == 200, listed.text
    assert [x["scope_key"] for x in listed.json()["limits"]] == ["default"]
    [key] = listed.json()["keys"]
    assert (key["key"], key["waiting"], key["executing"], key["max"]) == (
        "contract:default/c-9",
        1,
        0,
        2,
    )
    hidden = await client.get(f"/v1/projects/{P}/limits", headers=bearer(theirs))
    assert hidden.status_code == 403

    gone = await client.post(
        f"/v1/projects/{P}/limits/remove", json={"contract": "default"}, headers=bearer(mine)
    )
    assert gone.status_code == 200, gone.text
    again = await client.post(
        f"/v1/projects/{P}/limits/remove", json={"contract": "default"}, headers=bearer(mine)
    )
    assert (again.status_code, again.json()["code"]) == (404, "E-CONCURRENCY-002")


def test_the_cli_sets_lists_and_drops_a_limit(settings: Settings) -> None:
    made = cli(
        settings,
        "projects",
        "limit",
        P,
        "--channel",
        "api",
        "--key",
        "input.customer",
        "--max",
        'input.tier == "premium" ? 5 : 1',
        "--global-max",
        "20",
    )
    assert made.returncode == 0, made.stderr
    assert "channel api of proj-a" in made.stdout
    listed = cli(settings, "projects", "limits", "--json")
    [row] = msgspec.json.decode(listed.stdout)["limits"]
    assert (row["project_id"], row["scope"], row["global_max"]) == (P, "channel", 20)
    assert row["set_by"].startswith("cli:")
    table = cli(settings, "projects", "limits")
    assert "input.customer" in table.stdout
    bad = cli(settings, "projects", "limit", P, "--channel", "api", "--key", "1 +")
    assert bad.returncode == 1 and "E-INPUT-001" in bad.stderr
    dropped = cli(settings, "projects", "unlimit", P, "--channel", "api")
    assert dropped.returncode == 0, dropped.stderr
    missing = cli(settings, "projects", "unlimit", P, "--channel", "api")
    assert missing.returncode == 1 and "E-CONCURRENCY-002" in missing.stderr
