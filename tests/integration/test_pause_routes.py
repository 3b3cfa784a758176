"""The pause routes and ``awooop projects`` on real Postgres: a project's manage token pauses and
resumes its own project only, a read token sees without changing, and the CLI records its OS
user. Who may act is the management routes' rule (:mod:`awooop.http.auth`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.runs import pauses
from tests.support.http import app_client
from tests.support.workers import cli

P, Q = "proj-a", "proj-b"


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def active(db: Database, project: str) -> list[pauses.Pause]:
    return await db.in_platform(lambda c: pauses.listing(c, project))


async def test_a_project_token_pauses_and_resumes_its_own_project_only(
    client: httpx.AsyncClient, db: Database
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    _, theirs = await credentials.create_management_token(db, Q, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    _, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")

    refused = await client.post(f"/v1/projects/{Q}/pause", json={}, headers=bearer(mine))
    assert (refused.status_code, refused.json()["code"]) == (403, "E-AUTH-002")
    read_only = await client.post(f"/v1/projects/{P}/pause", json={}, headers=bearer(reader))
    assert (read_only.status_code, read_only.json()["code"]) == (403, "E-AUTH-004")
    assert await active(db, P) == [] and await active(db, Q) == []

    made = await client.post(
        f"/v1/projects/{P}/pause",
        json={"channel": "telegram", "reason": "provider outage"},
        headers=bearer(mine),
    )
    assert made.status_code == 200, made.text
    body = made.json()
    assert (body["scope"], body["scope_key"], body["created"], body["active"]) == (
        "channel",
        "telegram",
        True,
        True,
    )
    assert body["paused_by"].startswith("manage-token:")
    again = await client.post(
        f"/v1/projects/{P}/pause", json={"channel": "telegram"}, headers=bearer(mine)
    )
    assert again.json()["created"] is False and again.json()["pause_id"] == body["pause_id"]
    both = await client.post(
        f"/v1/projects/{P}/pause", json={"channel": "a", "contract": "b"}, headers=bearer(mine)
    )
    assert (both.status_code, both.json()["code"]) == (400, "E-INPUT-001")

    # Q's token neither sees nor resumes P's pause; P's read token sees it.
    hidden = await client.get(f"/v1/projects/{P}/pauses", headers=bearer(theirs))
    assert hidden.status_code == 403
    listed = await client.get(f"/v1/projects/{P}/pauses", headers=bearer(reader))
    assert [p["scope_key"] for p in listed.json()["pauses"]] == ["telegram"]
    resumed_elsewhere = await client.post(
        f"/v1/projects/{Q}/resume", json={"channel": "telegram"}, headers=bearer(theirs)
    )
    assert (resumed_elsewhere.status_code, resumed_elsewhere.json()["code"]) == (404, "E-PAUSE-001")
    assert len(await active(db, P)) == 1

    ended = await client.post(
        f"/v1/projects/{P}/resume",
        json={"channel": "telegram", "actor": "alice"},
        headers=bearer(admin),
    )
    assert ended.status_code == 200, ended.text
    assert (ended.json()["active"], ended.json()["resumed_by"]) == (False, "alice")
    assert await active(db, P) == []
    history = await client.get(f"/v1/projects/{P}/pauses?history=1", headers=bearer(mine))
    assert [p["active"] for p in history.json()["pauses"]] == [False]


def test_the_cli_pauses_lists_and_resumes(settings: Settings) -> None:
    paused = cli(settings, "projects", "pause", P, "--contract", "triage", "--reason", "bad model")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == f"contract triage of {P} paused"
    twice = cli(settings, "projects", "pause", P, "--contract", "triage")
    assert "already paused by cli:" in twice.stdout
    listed = cli(settings, "projects", "pauses", "--json")
    [row] = msgspec.json.decode(listed.stdout)
    assert (row["project_id"], row["scope"], row["key"], row["reason"]) == (
        P,
        "contract",
        "triage",
        "bad model",
    )
    assert row["paused_by"].startswith("cli:")
    resumed = cli(settings, "projects", "resume", P, "--contract", "triage")
    assert resumed.returncode == 0, resumed.stderr
    missing = cli(settings, "projects", "resume", P, "--contract", "triage")
    assert missing.returncode == 1 and "E-PAUSE-001" in missing.stderr
    table = cli(settings, "projects", "pauses", "--history")
    assert "triage" in table.stdout and "bad model" in table.stdout
