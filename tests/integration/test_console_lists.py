"""The console's dead-letter and operations lists on real Postgres and Redis: what each
session sees (its project; an admin every project), the filters, the keyset pages, the redrive
from the list, and that a run retried to completion offers no redrive."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Connection, Database
from awooop.core.errors import DeliveryLimitError, MaxAttemptsExceededError
from awooop.core.events import RunFailed
from awooop.eventlog import deadletters
from awooop.eventlog.run_reads import LOCK_MANY
from awooop.eventlog.runs import apply_and_store_many
from awooop.eventlog.state import row_to_state
from awooop.ingest import credentials
from awooop.runs import bulk, deadletter_list, listing, operation_list
from awooop.worker.assembly import build_worker
from tests.support import console, handlers
from tests.support.http import app_client
from tests.support.runs import create_runs, load

P, Q = "proj-lists", "proj-lists-other"
DEAD_ROW = re.compile(r'<tr class="dead-letter">.*?</tr>', re.S)
OP_ROW = re.compile(r'<tr class="operation">.*?</tr>', re.S)


async def dead_lettered(db: Database, project: str, count: int, code: str) -> list[uuid.UUID]:
    """``count`` runs failed with a dead letter each (as the reaper or a worker fails them)."""
    run_ids = await create_runs(db, project, count, payload={})
    async with db.tenant(project) as conn:
        rows = await conn.fetch(LOCK_MANY, run_ids)
        await apply_and_store_many(
            conn,
            [
                (
                    row_to_state(r),
                    RunFailed(at=r["db_now"], reason="gave up", code=code, dead_letter=True),
                )
                for r in rows
            ],
        )
    return run_ids


async def log_in(http: httpx.AsyncClient, token: str) -> str:
    await console.log_in(http, token)
    return console.csrf_of(await http.get("/ui/runs"))


def runs_listed(text: str) -> set[str]:
    return set(re.findall(r'href="/ui/runs/[^/]+/([0-9a-f-]{36})"', text))


async def test_the_dead_letters_of_the_sessions_project_newest_first_filtered_and_paged(
    settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    delivered = await dead_lettered(db, P, 3, DeliveryLimitError.code)
    expired = await dead_lettered(db, P, 2, MaxAttemptsExceededError.code)
    elsewhere = await dead_lettered(db, Q, 2, DeliveryLimitError.code)
    mine = {str(r) for r in delivered + expired}
    async with app_client(settings, db) as http:
        await log_in(http, manage)
        page = await http.get("/ui/dead-letters")
        assert page.status_code == 200 and "<h1>Dead letters</h1>" in page.text
        assert runs_listed(page.text) == mine
        assert len(DEAD_ROW.findall(page.text)) == 5
        assert page.text.count('class="redrive"') == 5

        by_code = await http.get("/ui/dead-letters", params={"code": "E-RUN-004"})
        assert runs_listed(by_code.text) == {str(r) for r in expired}
        by_channel = await http.get("/ui/dead-letters", params={"channel": "telegram"})
        assert runs_listed(by_channel.text) == set()
        assert "No open dead letter matches these filters" in by_channel.text
        by_api = await http.get("/ui/dead-letters", params={"channel": "api", "since": "1h"})
        assert runs_listed(by_api.text) == mine
        future = await http.get("/ui/dead-letters", params={"since": "2999-01-01T00:00:00Z"})
        assert runs_listed(future.text) == set()
        bad = await http.get("/ui/dead-letters", params={"code": "nope"})
        assert bad.status_code == 400 and "E-INPUT-001" in bad.text

        other = await http.get("/ui/dead-letters", params={"project": Q})
        assert other.status_code == 403 and "E-AUTH-002" in other.text
        assert not runs_listed(other.text) & {str(r) for r in elsewhere}

        # Pages of two: newest first, every dead letter once, the filters kept.
        monkeypatch.setattr(deadletter_list, "PAGE", 2)
        seen: list[str] = []
        url = "/ui/dead-letters?channel=api"
        while url:
            shown = await http.get(url)
            rows = DEAD_ROW.findall(shown.text)
            assert 1 <= len(rows) <= 2
            seen += [re.findall(r"/ui/runs/[^/]+/([0-9a-f-]{36})", r)[0] for r in rows]
            found = re.search(r'id="next" href="([^"]+)"', shown.text)
            url = found.group(1).replace("&amp;", "&") if found else ""
            assert not url or "channel=api" in url
        assert len(seen) == 5 and set(seen) == mine
    async with db.platform() as conn:
        order = await conn.fetch(
            "SELECT run_id FROM awooop_dead_letters WHERE project_id = $1 "
            "ORDER BY dead_lettered_at DESC, dead_letter_id DESC",
            P,
        )
    assert seen == [str(r["run_id"]) for r in order]


async def test_an_admin_sees_every_project_and_a_read_session_no_redrive(
    settings: Settings, db: Database
) -> None:
    _, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    _, read = await credentials.create_management_token(db, Q, "read")
    mine = await dead_lettered(db, P, 1, DeliveryLimitError.code)
    theirs = await dead_lettered(db, Q, 1, DeliveryLimitError.code)
    undecodable = deadletters.DeadLetterRecord(
        project_id=PLATFORM_PROJECT,
        source=deadletters.WORK,
        group_name="workers",
        source_entry_id="1-1",
        reason="undecodable",
        message=b"\xff",
    )
    await db.in_platform_writes(lambda conn: deadletters.record(conn, undecodable))
    async with app_client(settings, db) as http:
        await log_in(http, admin)
        every = await http.get("/ui/dead-letters")
        assert runs_listed(every.text) == {str(mine[0]), str(theirs[0])}
        assert (
            len(DEAD_ROW.findall(every.text)) == 3 and "an undecodable work message" in every.text
        )
        assert every.text.count('class="redrive"') == 2  # none for a message without a run
        only_q = await http.get("/ui/dead-letters", params={"project": Q})
        assert runs_listed(only_q.text) == {str(theirs[0])}
    async with app_client(settings, db) as http:
        await log_in(http, read)
        page = await http.get("/ui/dead-letters")
        assert runs_listed(page.text) == {str(theirs[0])}
        assert 'class="redrive"' not in page.text


async def test_redrive_from_the_list_and_a_completed_run_offers_none(
    settings: Settings, fast: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    [redriven, retried] = await dead_lettered(db, P, 2, DeliveryLimitError.code)
    async with app_client(settings, db) as http:
        csrf = await log_in(http, manage)
        page = (await http.get("/ui/dead-letters")).text
        [form] = [r for r in DEAD_ROW.findall(page) if str(redriven) in r]
        entry = re.search(r'name="entry" value="([^"]+)"', form)
        assert entry is not None
        done = await http.post(
            f"/ui/runs/{P}/{redriven}/redrive", data={"csrf": csrf, "entry": entry.group(1)}
        )
        assert done.status_code == 303
        assert (await load(db, P, redriven)).status == "PENDING"
        # The other run is retried rather than redriven: its dead letter closes too.
        retry = await http.post(f"/ui/runs/{P}/{retried}/retry", data={"csrf": csrf})
        assert retry.status_code == 303
        built = build_worker(db=db, settings=fast, handler=handlers.journaled, concurrency=2)
        assert await built.worker.run_until_idle() == 2
        for run_id in (redriven, retried):
            assert (await load(db, P, run_id)).status == "COMPLETED"
            run_page = await http.get(f"/ui/runs/{P}/{run_id}")
            assert "Redrive" not in run_page.text and "<h2>Dead letters</h2>" not in run_page.text
        after = await http.get("/ui/dead-letters")
        assert runs_listed(after.text) == set() and 'id="empty"' in after.text
        assert "No open dead letter." in after.text
    async with db.platform() as conn:
        closed = await conn.fetch(
            "SELECT resolution FROM awooop_dead_letters WHERE run_id = ANY($1) ORDER BY 1",
            [redriven, retried],
        )
    assert [r["resolution"] for r in closed] == ["redriven", "retried"]


async def operation(
    db: Database, project: str | None, kind: str = "retry", person: str | None = None
) -> bulk.Operation:
    f = listing.RunFilter(project=project, status=listing.RunStatus.FAILED)

    async def create(conn: Connection) -> bulk.Operation:
        return await bulk.create(
            conn, kind, f, actor="cli:test", via="cli", expected=3, person=person
        )

    if project is None:
        return await db.in_platform_writes(create)
    return await db.in_tenant(project, create)


async def test_the_operations_of_the_sessions_project_with_their_progress(
    settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    _, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    await dead_lettered(db, P, 3, DeliveryLimitError.code)
    older = await operation(db, P, "cancel", person="Olga")
    done = await operation(db, P, person="Dev")
    finished = await bulk.execute(db, P, done.operation_id)
    assert (finished.state, finished.changed) == ("done", 3)
    theirs = await operation(db, Q)
    across = await operation(db, None)
    async with app_client(settings, db) as http:
        await log_in(http, manage)
        page = await http.get("/ui/operations")
        assert page.status_code == 200 and "<h1>Bulk operations</h1>" in page.text
        rows = OP_ROW.findall(page.text)
        assert [str(done.operation_id) in rows[0], str(older.operation_id) in rows[1]] == [
            True,
            True,
        ]
        assert len(rows) == 2
        assert f'href="/ui/operations/{done.operation_id}"' in rows[0]
        assert '<td class="state">done</td>' in rows[0] and "3 of 3: 3 retried" in rows[0]
        assert "Dev (cli:test) via cli" in rows[0]
        assert '<td class="state">running</td>' in rows[1] and "0 of 3: 0 cancelled" in rows[1]
        refused = await http.get("/ui/operations", params={"project": Q})
        assert refused.status_code == 403 and str(theirs.operation_id) not in refused.text

        monkeypatch.setattr(operation_list, "PAGE", 1)
        first = await http.get("/ui/operations")
        found = re.search(r'id="next" href="([^"]+)"', first.text)
        assert found is not None and str(done.operation_id) in first.text
        second = await http.get(found.group(1).replace("&amp;", "&"))
        assert str(older.operation_id) in second.text and 'id="next"' not in second.text
        monkeypatch.setattr(operation_list, "PAGE", 50)
    async with app_client(settings, db) as http:
        await log_in(http, admin)
        every = await http.get("/ui/operations")
        ids = {str(o.operation_id) for o in (older, done, theirs, across)}
        assert {i for i in ids if i in every.text} == ids
        only_q = await http.get("/ui/operations", params={"project": Q})
        assert len(OP_ROW.findall(only_q.text)) == 1 and str(theirs.operation_id) in only_q.text


async def test_empty_lists_say_what_would_appear_and_the_nav_links_them(
    settings: Settings, db: Database
) -> None:
    _, read = await credentials.create_management_token(db, P, "read")
    async with app_client(settings, db) as http:
        await log_in(http, read)
        runs = await http.get("/ui/runs")
        assert 'href="/ui/dead-letters"' in runs.text and 'href="/ui/operations"' in runs.text
        dead = await http.get("/ui/dead-letters")
        assert 'id="empty"' in dead.text and "appears here when the runtime gives up" in dead.text
        ops = await http.get("/ui/operations")
        assert 'id="empty"' in ops.text and "No bulk operation yet" in ops.text
        assert 'name="viewport"' in ops.text
    async with app_client(settings, db) as http:
        assert (await http.get("/ui/dead-letters")).headers["location"].startswith("/ui/login")
        assert (await http.get("/ui/operations")).status_code == 303
