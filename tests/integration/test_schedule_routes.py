"""The schedule routes and ``awooop schedules`` on real Postgres: a project's manage token
creates, pauses, resumes and deletes its own schedules only, a read token sees them, another
project's token gets 403 and another project's schedule 404; bad input is refused with its
code and writes nothing; a project's bound holds; a run a schedule started shows its schedule
and fire time."""

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
}


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    capped = msgspec.structs.replace(settings, schedules_per_project=3)
    async with app_client(capped, db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def all_schedules(db: Database) -> list[store.Schedule]:
    return await db.in_platform(lambda c: store.listing(c, None))


async def test_a_project_token_manages_its_own_schedules(
    client: httpx.AsyncClient, db: Database
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    _, theirs = await credentials.create_management_token(db, Q, "manage")
    path = f"/v1/projects/{P}/schedules"

    assert (await client.post(path, json=BODY)).json()["code"] == "E-AUTH-001"
    read_only = await client.post(path, json=BODY, headers=bearer(reader))
    assert (read_only.status_code, read_only.json()["code"]) == (403, "E-AUTH-004")
    foreign = await client.post(path, json=BODY, headers=bearer(theirs))
    assert (foreign.status_code, foreign.json()["code"]) == (403, "E-AUTH-002")
    assert await all_schedules(db) == []

    made = await client.post(
        path, json={**BODY, "jitter": "30s", "catch_up": "all"}, headers=bearer(mine)
    )
    assert made.status_code == 201, made.text
    got = made.json()
    sid = got["schedule_id"]
    assert (got["cron"], got["timezone"], got["contract_id"], got["input"]) == (
        "30 2 * * *",
        "Europe/Madrid",
        "nightly",
        {"report": "daily"},
    )
    assert (got["catch_up"], got["catch_up_window_s"], got["overlap"], got["jitter_s"]) == (
        "all",
        3600,
        "skip",
        30,
    )
    assert got["next_fire_local"].endswith(
        ("T02:30:00+01:00", "T02:30:00+02:00", "T03:00:00+02:00")
    )
    assert got["created_by"].startswith("manage-token:")

    listed = await client.get(path, headers=bearer(reader))
    assert [s["schedule_id"] for s in listed.json()] == [sid]
    shown = await client.get(f"{path}/{sid}", headers=bearer(reader))
    assert shown.status_code == 200 and len(shown.json()["upcoming"]) == 5
    assert (await client.get(f"/v1/projects/{Q}/schedules", headers=bearer(theirs))).json() == []
    hidden = await client.get(f"/v1/projects/{Q}/schedules/{sid}", headers=bearer(theirs))
    assert (hidden.status_code, hidden.json()["code"]) == (404, "E-SCHEDULE-004")
    for action in ("pause", "resume"):
        other = await client.post(
            f"/v1/projects/{Q}/schedules/{sid}/{action}", headers=bearer(theirs)
        )
        assert (other.status_code, other.json()["code"]) == (404, "E-SCHEDULE-004")
    gone = await client.delete(f"/v1/projects/{Q}/schedules/{sid}", headers=bearer(theirs))
    assert gone.status_code == 404

    paused = await client.post(f"{path}/{sid}/pause", headers=bearer(mine))
    assert paused.status_code == 200 and paused.json()["paused_at"] is not None
    resumed = await client.post(f"{path}/{sid}/resume", headers=bearer(mine))
    assert resumed.status_code == 200 and resumed.json()["paused_at"] is None
    deleted = await client.delete(f"{path}/{sid}", headers=bearer(mine))
    assert deleted.status_code == 200 and deleted.json()["schedule_id"] == sid
    again = await client.delete(f"{path}/{sid}", headers=bearer(mine))
    assert (again.status_code, again.json()["code"]) == (404, "E-SCHEDULE-004")
    odd = await client.get(f"{path}/not-a-uuid", headers=bearer(mine))
    assert (odd.status_code, odd.json()["code"]) == (404, "E-SCHEDULE-004")
    assert await all_schedules(db) == []


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"cron": "* * *"}, "E-SCHEDULE-001"),
        ({"cron": "61 * * * *"}, "E-SCHEDULE-001"),
        ({"timezone": "Mars/Olympus"}, "E-SCHEDULE-002"),
        ({"catch_up": "everything"}, "E-SCHEDULE-003"),
        ({"overlap": "queue"}, "E-SCHEDULE-003"),
        ({"catch_up_window": "10s"}, "E-SCHEDULE-003"),
        ({"jitter": "2d"}, "E-SCHEDULE-003"),
        ({"contract": "two words"}, "E-INPUT-001"),
        ({"input": {"nul": "\u0000"}}, "E-INPUT-001"),
        ({"surprise": 1}, "E-INPUT-001"),
        ({"cron": 5}, "E-INPUT-001"),
    ],
)
async def test_bad_input_is_refused_with_its_code_and_writes_nothing(
    client: httpx.AsyncClient, db: Database, change: dict[str, Any], code: str
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    refused = await client.post(
        f"/v1/projects/{P}/schedules", json={**BODY, **change}, headers=bearer(mine)
    )
    assert (refused.status_code, refused.json()["code"]) == (400, code), refused.text
    assert await all_schedules(db) == []


async def test_a_project_has_at_most_its_bound_of_schedules(
    client: httpx.AsyncClient, db: Database
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    _, theirs = await credentials.create_management_token(db, Q, "manage")
    for _ in range(3):
        made = await client.post(f"/v1/projects/{P}/schedules", json=BODY, headers=bearer(mine))
        assert made.status_code == 201
    over = await client.post(f"/v1/projects/{P}/schedules", json=BODY, headers=bearer(mine))
    assert (over.status_code, over.json()["code"]) == (409, "E-SCHEDULE-005")
    other = await client.post(f"/v1/projects/{Q}/schedules", json=BODY, headers=bearer(theirs))
    assert other.status_code == 201  # the bound is per project
    assert len(await all_schedules(db)) == 4


async def test_a_scheduled_run_shows_its_schedule_and_fire_time(
    client: httpx.AsyncClient, db: Database, settings: Settings
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    made = await client.post(
        f"/v1/projects/{P}/schedules", json={**BODY, "cron": "* * * * *"}, headers=bearer(mine)
    )
    schedule = made.json()
    fire_time = datetime.fromisoformat(schedule["next_fire_at"])
    fired = await schedule_loop.fire_due(db, settings, lambda: fire_time + timedelta(seconds=1))
    assert fired.started == 1
    after = await db.in_tenant(P, lambda c: store.get(c, P, uuid.UUID(schedule["schedule_id"])))
    run = await client.get(f"/v1/projects/{P}/runs/{after.last_run_id}", headers=bearer(mine))
    assert run.json()["schedule"] == {
        "schedule_id": schedule["schedule_id"],
        "fire_time": fire_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    assert run.json()["provider_event_id"].startswith(f"schedule:{schedule['schedule_id']}:")


def test_the_cli_creates_lists_shows_pauses_resumes_and_deletes(settings: Settings) -> None:
    bad = cli(settings, "schedules", "create", P, "--cron", "* * *", "--timezone", "UTC",
              "--contract", "c", "--input", "{}")  # fmt: skip
    assert bad.returncode == 1 and "E-SCHEDULE-001" in bad.stderr
    zone = cli(settings, "schedules", "create", P, "--cron", "0 3 * * *", "--timezone",
               "Nowhere/Else", "--contract", "c", "--input", "{}")  # fmt: skip
    assert zone.returncode == 1 and "E-SCHEDULE-002" in zone.stderr
    made = cli(settings, "schedules", "create", P, "--cron", "0 3 * * *", "--timezone",
               "America/New_York", "--contract", "nightly", "--input", '{"n": 1}',
               "--catch-up", "skip", "--overlap", "cancel_previous", "--jitter", "1m",
               "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    schedule = msgspec.json.decode(made.stdout)
    sid = schedule["schedule_id"]
    assert (schedule["catch_up"], schedule["overlap"], schedule["jitter_s"]) == (
        "skip",
        "cancel_previous",
        60,
    )
    assert schedule["created_by"].startswith("cli:")
    listed = cli(settings, "schedules", "list", "--project", P)
    assert sid in listed.stdout and "America/New_York" in listed.stdout
    shown = cli(settings, "schedules", "show", P, sid)
    assert shown.returncode == 0 and shown.stdout.count("T03:00:00-0") == 5 + 1  # upcoming + next
    paused = cli(settings, "schedules", "pause", P, sid)
    assert paused.returncode == 0 and "paused" in paused.stdout
    resumed = cli(settings, "schedules", "resume", P, sid, "--json")
    assert msgspec.json.decode(resumed.stdout)["paused_at"] is None
    assert cli(settings, "schedules", "delete", P, sid).returncode == 0
    missing = cli(settings, "schedules", "show", P, sid)
    assert missing.returncode == 1 and "E-SCHEDULE-004" in missing.stderr
