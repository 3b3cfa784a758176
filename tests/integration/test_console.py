"""The console under /ui through the ASGI app on real Postgres and Redis: login and
session cookie, the run list's filters, the run page, actions with CSRF and the actor, the
read scope, another project's token, revocation; and the read scope on the bearer routes."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError
from awooop.core.events import run_stream_id
from awooop.ingest import credentials
from awooop.runs import leases
from tests.support import console
from tests.support.http import app_client
from tests.support.runs import create_runs, events_of, load

P, Q = "proj-console", "proj-console-other"


async def failed_run(db: Database, project: str) -> uuid.UUID:
    [run_id] = await create_runs(db, project)
    assert await db.in_tenant(project, lambda c: leases.claim(c, run_id, "host:1:w1", 0.01))
    await asyncio.sleep(0.05)
    failed = await db.in_tenant(
        project,
        lambda c: leases.fail_undeliverable(
            c, run_id, "host:1:w2", "delivered too often", DeliveryLimitError.code
        ),
    )
    assert failed is not None
    return run_id


async def log_in(http: httpx.AsyncClient, token: str) -> str:
    """Log in through the form; the run list's CSRF token."""
    answer = await console.log_in(http, token)
    assert answer.headers["location"] == "/ui/runs"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    runs = await http.get("/ui/runs")
    assert runs.status_code == 200
    return console.csrf_of(runs)


async def test_login_list_filter_open_and_retry_with_the_actor(
    settings: Settings, db: Database
) -> None:
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    failed = await failed_run(db, P)
    [pending] = await create_runs(db, P)
    [other] = await create_runs(db, Q)
    async with app_client(settings, db) as http:
        assert (await http.get("/ui/runs")).status_code == 303  # to the login
        csrf = await log_in(http, manage)
        listed = (await http.get("/ui/runs")).text
        assert str(failed) in listed and str(pending) in listed and str(other) not in listed
        only_failed = (await http.get("/ui/runs", params={"status": "FAILED"})).text
        assert str(failed) in only_failed and str(pending) not in only_failed
        by_reason = await http.get("/ui/runs", params={"blocked_on": "failed_dead_lettered"})
        assert str(failed) in by_reason.text and str(pending) not in by_reason.text
        by_key = await http.get("/ui/runs", params={"q": str(pending)})
        assert str(pending) in by_key.text and str(failed) not in by_key.text
        bad = await http.get("/ui/runs", params={"status": "NOPE"})
        assert bad.status_code == 400 and "E-INPUT-001" in bad.text

        page = await http.get(f"/ui/runs/{P}/{failed}")
        assert page.status_code == 200
        assert "failed_dead_lettered" in page.text and "RunFailed" in page.text
        assert 'id="retry"' in page.text

        forged = await http.post(f"/ui/runs/{P}/{failed}/retry", data={"csrf": "x" * 43})
        assert forged.status_code == 403 and "E-AUTH-005" in forged.text
        assert (await load(db, P, failed)).status == "FAILED"  # nothing written

        done = await http.post(f"/ui/runs/{P}/{failed}/retry", data={"csrf": csrf})
        assert done.status_code == 303
        assert (await load(db, P, failed)).status == "PENDING"
        after = await http.get(done.headers["location"])
        assert "retry: the run is PENDING" in after.text
    retried = (await events_of(db, P, failed))[-1]
    assert type(retried).__name__ == "RunRetried"
    async with db.tenant(P) as conn:
        meta = await conn.fetchval(
            "SELECT metadata FROM awooop_events WHERE stream_id = $1 ORDER BY version DESC LIMIT 1",
            run_stream_id(failed),
        )
    assert meta == {"actor": f"manage-token:{manage_id}", "via": "console"}


async def test_read_scope_sees_without_buttons_and_is_refused_on_post(
    settings: Settings, db: Database
) -> None:
    _, read = await credentials.create_management_token(db, P, "read")
    failed = await failed_run(db, P)
    async with app_client(settings, db) as http:
        csrf = await log_in(http, read)
        page = await http.get(f"/ui/runs/{P}/{failed}")
        assert page.status_code == 200 and "failed_dead_lettered" in page.text
        assert 'id="retry"' not in page.text and 'id="actions"' not in page.text
        forged = await http.post(f"/ui/runs/{P}/{failed}/retry", data={"csrf": csrf})
        assert forged.status_code == 403 and "E-AUTH-004" in forged.text
    assert (await load(db, P, failed)).status == "FAILED"
    # The bearer routes: a read token may GET, never POST.
    async with app_client(settings, db, bearer=read) as api:
        assert (await api.get(f"/v1/projects/{P}/runs/{failed}")).status_code == 200
        refused = await api.post(f"/v1/projects/{P}/runs/{failed}/retry", json={})
        assert (refused.status_code, refused.json()["code"]) == (403, "E-AUTH-004")


async def test_another_projects_token_sees_nothing_of_it(settings: Settings, db: Database) -> None:
    _, other = await credentials.create_management_token(db, Q, "manage")
    failed = await failed_run(db, P)
    async with app_client(settings, db) as http:
        csrf = await log_in(http, other)
        assert str(failed) not in (await http.get("/ui/runs")).text
        forbidden = await http.get("/ui/runs", params={"project": P})
        assert forbidden.status_code == 403 and "E-AUTH-002" in forbidden.text
        page = await http.get(f"/ui/runs/{P}/{failed}")
        assert page.status_code == 403 and str(failed) not in page.text.split("</header>")[1]
        # Its own project path, another project's run: not found (row-level security).
        hidden = await http.get(f"/ui/runs/{Q}/{failed}")
        assert hidden.status_code == 404
        post = await http.post(f"/ui/runs/{P}/{failed}/retry", data={"csrf": csrf})
        assert post.status_code == 403
    assert (await load(db, P, failed)).status == "FAILED"


async def test_admin_sees_every_project_and_revocation_ends_sessions(
    settings: Settings, db: Database
) -> None:
    admin_id, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    a = await failed_run(db, P)
    [b] = await create_runs(db, Q)
    async with app_client(settings, db) as http:
        await log_in(http, admin)
        listed = (await http.get("/ui/runs")).text
        assert str(a) in listed and str(b) in listed
        only_q = (await http.get("/ui/runs", params={"project": Q})).text
        assert str(b) in only_q and str(a) not in only_q
        assert await credentials.revoke_token(db, PLATFORM_PROJECT, admin_id)
        assert (await http.get("/ui/runs")).status_code == 303  # back to the login


@pytest.mark.parametrize("token", ["", "awp_0123456789abcdef_nope", "garbage"])
async def test_a_bad_token_does_not_log_in(settings: Settings, db: Database, token: str) -> None:
    async with app_client(settings, db) as http:
        page = await http.get("/ui/login")
        answer = await http.post("/ui/login", data={"csrf": console.csrf_of(page), "token": token})
        assert answer.status_code == 401 and "awooop_console=" not in answer.headers.get(
            "set-cookie", ""
        )
        no_csrf = await http.post("/ui/login", data={"csrf": "wrong", "token": token})
        assert no_csrf.status_code == 403
