"""A project's flow-control page (``/ui/projects/{project}/flow``) on real Postgres: the
numbers it shows are the ones set up (concurrency keys executing and queued, the keys left out
past 50, a budget's usage, a rate limit's bucket, the runs waiting for a model call), a manage
session pauses (a reason required) and resumes through its forms, a read session sees no form
and its POST is refused, and another project's session neither sees nor acts on it."""

from __future__ import annotations

import html
import re
import uuid
from datetime import timedelta

from awooop import producer
from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Connection, Database
from awooop.eventlog import queries
from awooop.ingest import credentials
from awooop.llm import flow_store
from awooop.llm.flow_rules import OnExceed, key_text
from awooop.runs import concurrency, leases, pauses
from awooop.runs.pause_rules import Scope
from tests.support import console
from tests.support.http import app_client
from tests.support.webhooks import OTHER_PROJECT, PROJECT

P, Q = PROJECT, OTHER_PROJECT
PAGE = f"/ui/projects/{P}/flow"
ROW = re.compile(r'<tr class="(\w[\w-]*)">(.*?)</tr>', re.S)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
TAG = re.compile(r"<[^>]+>")


def rows(text: str, kind: str) -> list[list[str]]:
    """The cells (their text) of each table row of ``kind`` (its class)."""
    return [
        [html.unescape(TAG.sub("", c)).strip() for c in CELL.findall(body)]
        for k, body in ROW.findall(text)
        if k == kind
    ]


async def active(db: Database, project: str) -> list[pauses.Pause]:
    return await db.in_platform(lambda c: pauses.listing(c, project))


async def submit(db: Database, settings: Settings, customer: str) -> uuid.UUID:
    event = producer.ChannelEvent("api", uuid.uuid4().hex, {"customer": customer})
    return (await producer.submit(db, P, event, settings=settings)).run_id


async def flow_set_up(db: Database, settings: Settings) -> dict[str, list[uuid.UUID]]:
    """A limit of 2 per customer on channel api (global 100, depth cap 10): cust-a has 4 runs,
    2 executing; cust-b 1, executing; 51 more customers 1 queued run each (53 keys). A budget
    of 1000 tokens a day (300 used, 50 reserved), a rate limit of 5 an hour on model m-x with
    one token taken. cust-a's executing runs wait for the rate limit, cust-b's for the
    budget."""
    await db.in_tenant(
        P,
        lambda c: concurrency.set_limit(
            c,
            P,
            Scope.CHANNEL,
            "api",
            key_expr="input.customer",
            max_expr="2",
            global_max=100,
            depth_cap=10,
            actor="ops",
        ),
    )
    cust_a = [await submit(db, settings, "cust-a") for _ in range(4)]
    cust_b = [await submit(db, settings, "cust-b")]
    events = [producer.ChannelEvent("api", f"k{i}", {"customer": f"c-{i:02}"}) for i in range(51)]
    await producer.submit_many(db, P, events, settings=settings)
    batch = await leases.RunStatements(db).claim_many(cust_a + cust_b, "w1", 300.0)
    claimed = list(batch.claimed)
    assert len(claimed) == 3, batch

    async def flow(c: Connection) -> None:
        await flow_store.set_budget(
            c,
            P,
            "",
            tokens=1000,
            period_s=86400,
            reserve_tokens=100,
            on_exceed=OnExceed.WAIT,
            actor="ops",
        )
        made = await flow_store.set_limit(
            c,
            P,
            "m-x",
            limit=5,
            period_s=3600,
            burst=None,
            actor="ops",
        )
        assert await c.fetchrow(queries.load("llm_take_token"), made.limit_id, 60.0)
        await c.fetchrow(queries.load("llm_usage_ensure"), P, "", 86400, "tokens")
        await c.execute(
            "UPDATE awooop_llm_budget_usage SET used = 300, reserved = 50, calls = 7"
            " WHERE project_id = $1 AND model = '' AND period_s = 86400"
            " AND period_start <= now() AND period_start > now() - interval '1 day'",
            P,
        )
        for run_id in claimed:
            rated = run_id in cust_a
            await c.execute(
                queries.load("llm_wait_set"),
                run_id,
                P,
                1,
                "rate_limited" if rated else "over_budget",
                key_text(P, "m-x" if rated else ""),
                "<script>alert(1)</script>",
                await c.fetchval("SELECT now()") + timedelta(minutes=5),
            )

    await db.in_tenant(P, flow)
    return {"claimed": claimed, "cust_a": cust_a}


async def test_the_page_shows_the_numbers_that_were_set_up(
    settings: Settings, db: Database
) -> None:
    runs = await flow_set_up(db, settings)
    _, manage = await credentials.create_management_token(db, P, "manage")
    async with app_client(settings, db) as http:
        await console.log_in(http, manage)
        shown = await http.get(PAGE)
        assert shown.status_code == 200, shown.text
    text = shown.text
    assert 'id="not-paused"' in text and 'id="pause"' in text
    [limit] = rows(text, "limit")
    # scope, key expr, max expr, global max, depth cap, keys, executing, queued, set by
    assert limit[:8] == ["channel api", "input.customer", "2", "100", "10", "53", "3 of 100", "53"]
    keys = rows(text, "key")
    assert len(keys) == 50 and 'id="more-keys">3 more' in text
    assert keys[0][:4] == ["channel:api/cust-a", "channel:api", "2 of 2", "2"]
    [rate] = rows(text, "rate-limit")
    assert rate[0:3] == ["m-x", "5 per 1 h", "5"]
    assert 4.0 <= float(rate[3]) < 4.9 and rate[4:6] == ["1", "2"]
    [budget] = rows(text, "budget")
    assert budget[:6] == ["every model", "1000 tokens per 1 d", "300", "50", "650", "7"]
    assert budget[7:9] == ["wait", "1"]
    assert '<p id="waiting-count">3 run(s) waiting now' in text
    linked = set(re.findall(rf'href="/ui/runs/{P}/([0-9a-f-]{{36}})"', text))
    assert linked == {str(r) for r in runs["claimed"]}
    assert "<script>alert" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


async def test_a_manage_session_pauses_and_resumes_through_the_forms(
    settings: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    async with app_client(settings, db) as http:
        await console.log_in(http, manage)
        csrf = console.csrf_of(await http.get(PAGE))
        forged = await http.post(PAGE + "/pause", data={"scope": "project", "reason": "x"})
        assert "E-AUTH-005" in forged.text and await active(db, P) == []
        no_reason = await http.post(PAGE + "/pause", data={"csrf": csrf, "reason": " "})
        assert no_reason.status_code == 400 and "E-INPUT-001" in no_reason.text
        assert await active(db, P) == []

        paused = await http.post(
            PAGE + "/pause",
            data={"csrf": csrf, "scope": "project", "reason": "<b>deploy</b>", "actor": "alice"},
        )
        assert paused.status_code == 303 and paused.headers["location"] == PAGE
        [made] = await active(db, P)
        assert (made.scope, made.reason, made.paused_by) == (
            Scope.PROJECT,
            "<b>deploy</b>",
            "alice",
        )
        shown = await http.get(PAGE)
        assert 'id="done"' in shown.text and "project of " + P + " paused" in shown.text
        [row] = rows(shown.text, "pause")
        assert (row[0], row[1], row[3]) == ("project", "alice", "<b>deploy</b>")
        assert "&lt;b&gt;deploy&lt;/b&gt;" in shown.text and f'action="{PAGE}/resume"' in shown.text

        resumed = await http.post(PAGE + "/resume", data={"csrf": csrf, "scope": "project"})
        assert resumed.status_code == 303 and await active(db, P) == []
        again = await http.post(PAGE + "/resume", data={"csrf": csrf, "scope": "project"})
        assert "E-PAUSE-001" in again.text
        shown = await http.get(PAGE)
        assert 'id="not-paused"' in shown.text and "resumed" in shown.text


async def test_a_read_session_sees_no_form_and_its_post_is_refused(
    settings: Settings, db: Database
) -> None:
    await db.in_tenant(
        P, lambda c: pauses.pause(c, P, Scope.CHANNEL, "api", reason="outage", actor="ops")
    )
    _, reader = await credentials.create_management_token(db, P, "read")
    async with app_client(settings, db) as http:
        await console.log_in(http, reader)
        shown = await http.get(PAGE)
        assert shown.status_code == 200 and "outage" in shown.text
        assert 'id="pause"' not in shown.text and "<button>Resume" not in shown.text
        assert rows(shown.text, "pause")[0][:1] == ["channel api"]
        csrf = console.csrf_of(shown)  # the logout form's
        refused = await http.post(
            PAGE + "/resume", data={"csrf": csrf, "scope": "channel", "key": "api"}
        )
        assert refused.status_code == 403 and "E-AUTH-004" in refused.text
        assert len(await active(db, P)) == 1
        runs = await http.get("/ui/runs")
        assert f'href="{PAGE}"' in runs.text


async def test_another_projects_session_neither_sees_nor_acts(
    settings: Settings, db: Database
) -> None:
    await db.in_tenant(
        P, lambda c: pauses.pause(c, P, Scope.PROJECT, "", reason="secret-reason", actor="ops")
    )
    _, other = await credentials.create_management_token(db, Q, "manage")
    async with app_client(settings, db) as http:
        await console.log_in(http, other)
        shown = await http.get(PAGE)
        assert shown.status_code == 403 and "E-AUTH-002" in shown.text
        assert "secret-reason" not in shown.text
        csrf = console.csrf_of(await http.get(f"/ui/projects/{Q}/flow"))
        refused = await http.post(PAGE + "/resume", data={"csrf": csrf, "scope": "project"})
        assert refused.status_code == 403 and "E-AUTH-002" in refused.text
        paused = await http.post(PAGE + "/pause", data={"csrf": csrf, "reason": "mine now"})
        assert paused.status_code == 403 and "E-AUTH-002" in paused.text
    [still] = await active(db, P)
    assert still.reason == "secret-reason" and await active(db, Q) == []


async def test_an_admin_session_sees_and_resumes_any_project(
    settings: Settings, db: Database
) -> None:
    await db.in_tenant(
        Q, lambda c: pauses.pause(c, Q, Scope.CONTRACT, "triage", reason="bad", actor="ops")
    )
    _, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    async with app_client(settings, db) as http:
        await console.log_in(http, admin)
        page = f"/ui/projects/{Q}/flow"
        shown = await http.get(page)
        assert shown.status_code == 200 and rows(shown.text, "pause")[0][0] == "contract triage"
        listed = await http.get("/ui/pauses")
        assert f'href="{page}"' in listed.text
        resumed = await http.post(
            page + "/resume",
            data={"csrf": console.csrf_of(shown), "scope": "contract", "key": "triage"},
        )
        assert resumed.status_code == 303 and resumed.headers["location"] == page
    assert await active(db, Q) == []
