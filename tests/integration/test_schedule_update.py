"""A schedule changed in place (``PATCH`` route, ``awooop schedules update``): only the given
fields change, the id, counters, last run and pause stay; a change of when it fires moves it to
the first fire time after the change, and the loop then fires the new times; bad input is
refused with its code and changes nothing; another project can neither see nor change it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.loops import schedules as schedule_loop
from awooop.schedules import store
from tests.support.http import app_client
from tests.support.workers import cli

P, Q = "proj-a", "proj-b"
BODY: dict[str, Any] = {
    "cron": "30 2 * * *",
    "timezone": "Europe/Madrid",
    "contract": "nightly",
    "input": {"report": "daily"},
    "jitter": "30s",
}


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def stored(db: Database, sid: str) -> store.Schedule:
    return await db.in_tenant(P, lambda c: store.get(c, P, uuid.UUID(sid)))


async def test_a_patch_changes_only_what_it_gives(client: httpx.AsyncClient, db: Database) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    _, theirs = await credentials.create_management_token(db, Q, "manage")
    path = f"/v1/projects/{P}/schedules"
    sid = (await client.post(path, json=BODY, headers=bearer(mine))).json()["schedule_id"]
    await client.post(f"{path}/{sid}/pause", headers=bearer(mine))
    before = await stored(db, sid)

    read_only = await client.patch(
        f"{path}/{sid}", json={"overlap": "allow"}, headers=bearer(reader)
    )
    assert (read_only.status_code, read_only.json()["code"]) == (403, "E-AUTH-004")
    foreign = await client.patch(
        f"/v1/projects/{Q}/schedules/{sid}", json={"overlap": "allow"}, headers=bearer(theirs)
    )
    assert (foreign.status_code, foreign.json()["code"]) == (404, "E-SCHEDULE-004")
    assert await stored(db, sid) == before

    policy = await client.patch(
        f"{path}/{sid}",
        json={"overlap": "allow", "input": {"report": "weekly"}},
        headers=bearer(mine),
    )
    assert policy.status_code == 200, policy.text
    after = await stored(db, sid)
    assert (after.overlap, after.input) == ("allow", {"report": "weekly"})
    # Not when it fires: the fire time, the pause and everything else stay.
    unchanged = ("next_fire_at", "due_at", "paused_at", "cron", "timezone", "jitter_s", "fires")
    assert [getattr(after, f) for f in unchanged] == [getattr(before, f) for f in unchanged]
    assert after.schedule_id == before.schedule_id and after.created_by == before.created_by

    moved = await client.patch(
        f"{path}/{sid}", json={"cron": "15 * * * *", "timezone": "UTC"}, headers=bearer(mine)
    )
    assert moved.status_code == 200, moved.text
    body = moved.json()
    assert (body["cron"], body["timezone"], body["paused_at"] is not None) == (
        "15 * * * *",
        "UTC",
        True,
    )
    fire = datetime.fromisoformat(body["next_fire_at"])
    now = datetime.now(UTC)
    assert fire.minute == 15 and now < fire <= now + timedelta(hours=1)
    assert [datetime.fromisoformat(t).minute for t in body["upcoming"]] == [15] * 5


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"cron": "* * *"}, "E-SCHEDULE-001"),
        ({"timezone": "Mars/Olympus"}, "E-SCHEDULE-002"),
        ({"overlap": "queue"}, "E-SCHEDULE-003"),
        ({"jitter": "2h"}, "E-SCHEDULE-003"),  # longer than the cron's gap (an hour)
        ({"contract": "two words"}, "E-INPUT-001"),
        ({"surprise": 1}, "E-INPUT-001"),
        ({}, "E-INPUT-001"),
    ],
)
async def test_a_bad_patch_is_refused_with_its_code_and_changes_nothing(
    client: httpx.AsyncClient, db: Database, change: dict[str, Any], code: str
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    path = f"/v1/projects/{P}/schedules"
    made = await client.post(path, json={**BODY, "cron": "0 * * * *"}, headers=bearer(mine))
    sid = made.json()["schedule_id"]
    before = await stored(db, sid)
    refused = await client.patch(f"{path}/{sid}", json=change, headers=bearer(mine))
    assert (refused.status_code, refused.json()["code"]) == (400, code), refused.text
    assert await stored(db, sid) == before


async def test_the_loop_fires_the_new_times_after_an_update(
    db: Database, settings: Settings
) -> None:
    made = await db.in_tenant(
        P,
        lambda c: store.create(
            c,
            P,
            store.rules.define(
                cron_text="0 3 * * *", timezone="UTC", contract_id="nightly", input={}
            ),
            actor="test",
            now=datetime(2026, 3, 1, 12, tzinfo=UTC),
            limit=10,
        ),
    )
    changed_at = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)
    changed = await db.in_tenant(
        P,
        lambda c: store.update(
            c,
            P,
            made.schedule_id,
            {"cron": "*/10 * * * *"},
            actor="test",
            now=changed_at,
            min_interval_s=60,
        ),
    )
    assert changed.next_fire_at == datetime(2026, 3, 1, 12, 10, tzinfo=UTC)
    fired = await schedule_loop.fire_due(db, settings, lambda: changed_at + timedelta(minutes=6))
    assert fired.started == 1
    after = await db.in_tenant(P, lambda c: store.get(c, P, made.schedule_id))
    assert (after.fires, after.last_fire_at, after.next_fire_at) == (
        1,
        datetime(2026, 3, 1, 12, 10, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 20, tzinfo=UTC),
    )


def test_the_cli_updates_a_schedule(settings: Settings) -> None:
    made = cli(settings, "schedules", "create", P, "--cron", "0 3 * * *", "--timezone",
               "UTC", "--contract", "nightly", "--input", '{"n": 1}', "--json")  # fmt: skip
    sid = msgspec.json.decode(made.stdout)["schedule_id"]
    bad = cli(settings, "schedules", "update", P, sid, "--timezone", "Nowhere/Else")
    assert bad.returncode == 1 and "E-SCHEDULE-002" in bad.stderr
    empty = cli(settings, "schedules", "update", P, sid)
    assert empty.returncode == 1 and "E-INPUT-001" in empty.stderr
    changed = cli(settings, "schedules", "update", P, sid, "--cron", "0 4 * * *",
                  "--input", '{"n": 2}', "--overlap", "allow", "--json")  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    got = msgspec.json.decode(changed.stdout)
    assert (got["cron"], got["input"], got["overlap"], got["contract_id"]) == (
        "0 4 * * *",
        {"n": 2},
        "allow",
        "nightly",
    )
    assert got["next_fire_local"].endswith("T04:00:00+00:00")
