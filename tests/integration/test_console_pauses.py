"""The console's pause switch (``/ui/pauses``) on real Postgres: a manage session pauses and
resumes its own project only, a read session sees without a form, and the person the form names
is recorded as who paused."""

from __future__ import annotations

import httpx

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.runs import pauses
from awooop.runs.pause_rules import Scope
from tests.support import console
from tests.support.http import app_client

P, Q = "proj-console-a", "proj-console-b"


async def active(db: Database, project: str) -> list[pauses.Pause]:
    return await db.in_platform(lambda c: pauses.listing(c, project))


async def page(http: httpx.AsyncClient) -> tuple[httpx.Response, str]:
    shown = await http.get("/ui/pauses")
    assert shown.status_code == 200, shown.text
    return shown, console.csrf_of(shown)


async def test_a_manage_session_pauses_and_resumes_its_own_project(
    settings: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    async with app_client(settings, db) as http:
        await console.log_in(http, manage)
        shown, csrf = await page(http)
        assert 'id="none"' in shown.text and 'id="pause"' in shown.text
        paused = await http.post(
            "/ui/pauses/pause",
            data={
                "csrf": csrf,
                "scope": "channel",
                "key": "telegram",
                "reason": "outage",
                "actor": "alice",
            },
        )
        assert paused.status_code == 303, paused.text
        [made] = await active(db, P)
        assert (made.scope_key, made.reason, made.paused_by) == ("telegram", "outage", "alice")
        shown, csrf = await page(http)
        assert "channel telegram" in shown.text and "channel telegram of" in shown.text

        elsewhere = await http.post(
            "/ui/pauses/pause", data={"csrf": csrf, "project": Q, "scope": "project"}
        )
        assert "E-AUTH-002" in elsewhere.text and await active(db, Q) == []

        resumed = await http.post(
            "/ui/pauses/resume",
            data={"csrf": csrf, "project": P, "scope": "channel", "key": "telegram"},
        )
        assert resumed.status_code == 303
        assert await active(db, P) == []
        shown, _ = await page(http)
        assert 'id="resumed"' in shown.text and 'id="none"' in shown.text


async def test_a_read_session_sees_the_pauses_and_no_form(settings: Settings, db: Database) -> None:
    await db.in_tenant(
        P,
        lambda c: pauses.pause(c, P, Scope.PROJECT, "", reason="deploy", actor="ops"),
    )
    _, reader = await credentials.create_management_token(db, P, "read")
    async with app_client(settings, db) as http:
        await console.log_in(http, reader)
        shown, csrf = await page(http)
        assert "deploy" in shown.text and 'id="pause"' not in shown.text
        refused = await http.post("/ui/pauses/resume", data={"csrf": csrf, "scope": "project"})
        assert "E-AUTH-004" in refused.text
        assert len(await active(db, P)) == 1
