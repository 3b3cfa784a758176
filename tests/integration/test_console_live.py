"""The console's live pages and the run page's waterfall and timeline, through the ASGI app on
real Postgres and Redis: the run page tagged by the run's version (304 while it is unchanged,
a new page once an event is written), the list tagged by its content, the timeline's filter,
the live script served from the app under a strict policy, and live updates turned off."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from datetime import timedelta

import httpx
import msgspec

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import ModelCalled, RunCompleted, StepCompleted
from awooop.http import console_session as sessions
from awooop.ingest import credentials
from awooop.runs import leases, run_rows
from tests.integration.test_console import log_in
from tests.integration.test_tenant_capacity import RUN_READ, table_locked, waiting_on_lock
from tests.support.http import app_client
from tests.support.runs import create_runs
from tests.support.waiting import eventually

P = "proj-console-live"
WORKER = "host:1:w1"
SCRIPT = re.compile(
    r'<script src="/ui/static/console-live.js" defer data-live="([^"]+)" '
    r'data-every-ms="(\d+)" data-etag="([^"]*)" data-final="([01])">'
)
BAR = re.compile(r'<tr class="bar kind-(\w+)[^"]*"')


async def claimed_run(db: Database) -> uuid.UUID:
    [run_id] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, WORKER, 30))
    return run_id


async def step(db: Database, run_id: uuid.UUID, name: str) -> None:
    await db.in_tenant(
        P,
        lambda c: run_rows.record(
            c,
            run_id,
            lambda s, now: StepCompleted(
                at=now, worker_id=WORKER, attempt=s.attempt_count, step=name, result={"ok": 1}
            ),
        ),
    )


async def model_call(db: Database, run_id: uuid.UUID) -> None:
    await db.in_tenant(
        P,
        lambda c: run_rows.record(
            c,
            run_id,
            lambda s, now: ModelCalled(
                at=now,
                worker_id=WORKER,
                attempt=s.attempt_count,
                contract_family="llm",
                contract_id="default",
                model="local-small",
                revision_id=None,
                body_hash=None,
                started_at=now - timedelta(milliseconds=250),
                duration_ms=250.0,
                outcome="ok",
            ),
        ),
    )


async def complete(db: Database, run_id: uuid.UUID) -> None:
    await db.in_tenant(
        P,
        lambda c: run_rows.record(
            c,
            run_id,
            lambda s, now: RunCompleted(
                at=now, worker_id=WORKER, attempt=s.attempt_count, result={"done": True}
            ),
        ),
    )


async def unchanged_is_304(http: httpx.AsyncClient, url: str) -> bool:
    """A page asked again with the tag it was just served with is 304 (a running run's tag
    also names a 10 s slice of the clock: at a slice's edge the second answer is a new page,
    so this is asked until it is not at an edge)."""
    first = await http.get(url)
    again = await http.get(url, headers={"if-none-match": first.headers["etag"]})
    return again.status_code == 304


async def test_the_run_page_is_tagged_by_the_runs_version_and_complete_without_script(
    settings: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    run_id = await claimed_run(db)
    url = f"/ui/runs/{P}/{run_id}"
    async with app_client(settings, db) as http:
        await log_in(http, manage)
        page = await http.get(url)
        assert page.status_code == 200
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy
        assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
        found = SCRIPT.search(page.text)
        assert found is not None, page.text[-800:]
        live, every, etag, final = found.groups()
        assert {"status", "blocked-on", "waterfall", "timeline"} <= set(live.split())
        assert (every, html.unescape(etag), final) == ("2000", page.headers["etag"], "0")
        # Without the script the page is whole: the attempt's bar is open, running, drawn in CSS.
        assert BAR.findall(page.text) == ["attempt"]
        assert "running" in page.text and 'style="left: ' in page.text
        assert 'id="timeline" data-version="2" data-status="RUNNING"' in page.text

        await eventually(lambda: unchanged_is_304(http, url), what="a 304 for an unchanged run")
        asked = await http.get(url, headers={"if-none-match": page.headers["etag"]})
        assert asked.status_code in (200, 304)  # 200 only when the clock slice moved on

        await step(db, run_id, "reserve")
        await model_call(db, run_id)
        changed = await http.get(url, headers={"if-none-match": page.headers["etag"]})
        assert changed.status_code == 200 and changed.headers["etag"] != page.headers["etag"]
        assert 'id="timeline" data-version="4"' in changed.text
        assert sorted(BAR.findall(changed.text)) == ["attempt", "model", "step"]
        assert "local-small" in changed.text and "250 ms" in changed.text

        await complete(db, run_id)
        done = await http.get(url)
        assert sorted(BAR.findall(done.text)) == ["attempt", "model", "step"]
        assert "running</strong>" not in done.text
        found = SCRIPT.search(done.text)
        assert found is not None and found.group(4) == "1"  # final: the script stops
        again = await http.get(url, headers={"if-none-match": done.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == done.headers["etag"]

        # A notice to show once is never answered 304.
        http.cookies.set(sessions.NOTICE_COOKIE, "retry: done", path="/ui")
        noticed = await http.get(url, headers={"if-none-match": done.headers["etag"]})
        assert noticed.status_code == 200 and "retry: done" in noticed.text


async def test_the_timeline_filter_keeps_event_types_and_groups_runs_of_one_type(
    settings: Settings, db: Database
) -> None:
    _, read = await credentials.create_management_token(db, P, "read")
    run_id = await claimed_run(db)
    for name in ("a", "b", "c", "d"):
        await step(db, run_id, name)
    await model_call(db, run_id)
    url = f"/ui/runs/{P}/{run_id}"
    async with app_client(settings, db) as http:
        await log_in(http, read)
        whole = await http.get(url)
        assert 'id="attempt-0-1"' in whole.text and 'id="attempt-1-2"' in whole.text
        assert "StepCompleted ×4 · #3–6" in whole.text  # folded in a <details>
        assert 'name="events" value="ModelCalled"' in whole.text
        rows = re.findall(r'<tr class="event" data-version="(\d+)">', whole.text)
        assert rows == [str(v) for v in range(1, 8)]
        assert re.search(r"\d\d:\d\d:\d\d\.\d{3} UTC", whole.text)  # to the millisecond

        only = await http.get(url, params={"events": "ModelCalled,RunCreated"})
        rows = re.findall(r'<tr class="event" data-version="(\d+)">', only.text)
        assert rows == ["1", "7"]
        assert "2 of 7 event(s)" in only.text and only.headers["etag"] != whole.headers["etag"]
        boxes = await http.get(url, params=[("events", "StepCompleted"), ("events", "Nope")])
        rows = re.findall(r'<tr class="event" data-version="(\d+)">', boxes.text)
        assert rows == ["3", "4", "5", "6"]
        assert 'value="StepCompleted" checked' in boxes.text


async def test_the_list_is_tagged_by_its_content_and_the_script_is_served(
    settings: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    [first] = await create_runs(db, P)
    async with app_client(settings, db) as http:
        await log_in(http, manage)
        page = await http.get("/ui/runs")
        found = SCRIPT.search(page.text)
        assert found is not None and found.group(1) == "runs runs-count"
        assert found.group(2) == "5000" and str(first) in page.text
        same = await http.get("/ui/runs", headers={"if-none-match": page.headers["etag"]})
        assert same.status_code == 304 and same.content == b""
        pending = await http.get(f"/ui/runs/{P}/{first}")
        assert "No bar yet" in pending.text and BAR.findall(pending.text) == []
        [second] = await create_runs(db, P)
        newer = await http.get("/ui/runs", headers={"if-none-match": page.headers["etag"]})
        assert newer.status_code == 200 and str(second) in newer.text

        script = await http.get("/ui/static/console-live.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert "If-None-Match" in script.text and "visibilitychange" in script.text
    # Without a session a poll is sent to the login, as a page is.
    async with app_client(settings, db) as anonymous:
        assert (await anonymous.get("/ui/runs")).status_code == 303


async def test_live_updates_turned_off_leave_no_script(settings: Settings, db: Database) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    run_id = await claimed_run(db)
    still = msgspec.structs.replace(settings, console_live_s=0.0)
    async with app_client(still, db) as http:
        await log_in(http, manage)
        for url in ("/ui/runs", f"/ui/runs/{P}/{run_id}"):
            page = await http.get(url)
            assert page.status_code == 200 and "console-live.js" not in page.text


async def test_polls_count_against_the_projects_share(settings: Settings, db: Database) -> None:
    """Polls are console requests: past the project's share (here 2) one is refused with 429
    (the script then waits longer), and the held ones end in 304 once their read is done."""
    _, read = await credentials.create_management_token(db, P, "read")
    run_id = await claimed_run(db)
    await complete(db, run_id)  # final: its tag does not move with the clock
    url = f"/ui/runs/{P}/{run_id}"
    shared = msgspec.structs.replace(settings, http_tenant_requests=2)
    async with app_client(shared, db) as http:
        await log_in(http, read)
        tag = {"if-none-match": (await http.get(url)).headers["etag"]}
        async with table_locked(settings.database_url, "awooop_run_state"):
            held = [asyncio.create_task(http.get(url, headers=tag)) for _ in range(2)]
            await eventually(
                lambda: polls_waiting(settings.database_url),
                equals=2,
                what="two polls reading the run's version, held by the lock",
            )
            refused = await http.get(url, headers=tag)
        answers = await asyncio.wait_for(asyncio.gather(*held), 60)
    assert refused.status_code == 429 and "E-HTTP-429" in refused.text
    assert [a.status_code for a in answers] == [304, 304]


async def polls_waiting(database_url: str) -> int:
    return len(await waiting_on_lock(database_url, RUN_READ))
