"""A project's weight in the fair share, through the routes and ``awooop projects set|shares`` on
real Postgres: any management token of the project reads it, only an admin token sets it (a
project's own token cannot raise its claim on everyone's capacity), a bad weight writes nothing,
and intake uses the weight for the runs submitted after it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.runs import fairness
from tests.support.http import app_client
from tests.support.workers import cli

P, Q = "proj-a", "proj-b"


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def weight_of(db: Database, project: str) -> int:
    return (await db.in_platform(lambda c: fairness.shares(c, project)))[0].weight


async def test_only_an_admin_token_sets_a_weight(client: httpx.AsyncClient, db: Database) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    _, other = await credentials.create_management_token(db, Q, "manage")
    _, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    path = f"/v1/projects/{P}/share"

    seen = await client.get(path, headers=bearer(reader))
    assert seen.status_code == 200, seen.text
    assert (seen.json()["weight"], seen.json()["set_by"]) == (1, None)
    foreign = await client.get(path, headers=bearer(other))
    assert (foreign.status_code, foreign.json()["code"]) == (403, "E-AUTH-002")

    raised = await client.put(path, json={"weight": 50}, headers=bearer(manage))
    assert (raised.status_code, raised.json()["code"]) == (403, "E-AUTH-003")
    for bad in (0, 1001, "3", 2.5, True):
        refused = await client.put(path, json={"weight": bad}, headers=bearer(admin))
        assert (refused.status_code, refused.json()["code"]) == (400, "E-INPUT-001"), bad
    assert await weight_of(db, P) == 1

    done = await client.put(path, json={"weight": 3, "actor": "Ana"}, headers=bearer(admin))
    assert done.status_code == 200, done.text
    assert (done.json()["weight"], done.json()["set_by"]) == (3, "Ana")
    assert (await client.get(path, headers=bearer(manage))).json()["weight"] == 3


async def test_intake_uses_the_weight_set_before_it(db: Database, settings: Settings) -> None:
    unseen = "proj-new"  # never submitted anything: setting its weight registers it
    await db.in_platform_writes(lambda c: fairness.set_share(c, unseen, 4, actor="test"))
    events = [producer.ChannelEvent("api", uuid.uuid4().hex, {}) for _ in range(3)]
    done = await producer.submit_many(db, unseen, events, settings=settings)
    tags = await db.in_platform(
        lambda c: c.fetch(
            "SELECT fair_tag FROM awooop_run_state WHERE run_id = ANY($1::uuid[])"
            " ORDER BY fair_tag",
            [s.run_id for s in done],
        )
    )
    assert [t["fair_tag"] for t in tags] == [0.0, 0.25, 0.5]


def test_the_cli_sets_and_lists_weights(settings: Settings) -> None:
    made = cli(settings, "projects", "set", P, "--weight", "5")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == f"{P}: weight 5"
    bad = cli(settings, "projects", "set", P, "--weight", "0")
    assert bad.returncode == 1 and "E-INPUT-001" in bad.stderr
    [row] = msgspec.json.decode(cli(settings, "projects", "shares", "--json").stdout)
    assert (row["project_id"], row["weight"]) == (P, 5)
    assert row["set_by"].startswith("cli:")
    assert "proj-b" in cli(settings, "projects", "shares", "--project", Q).stdout
