"""Approving and rejecting from a console session (or a management token) without the
approval token, on real Postgres and Redis: the person's name recorded and shown, the run
resuming and completing, the refusals (read scope, another project, a second decision) and a
token decision racing a session decision."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import ApprovalTokenUsedError, InvalidInputError
from awooop.core.events import ApprovalGranted, ApprovalRejected, run_stream_id
from awooop.ingest import credentials
from awooop.runs import approvals
from awooop.runs.approvals import ApprovalTicket, Decision
from awooop.worker.assembly import build_worker
from tests.support import console, handlers
from tests.support.http import app_client
from tests.support.runs import create_runs, events_of, load
from tests.support.waiting import eventually

P, Q = "proj-approve-ui", "proj-approve-ui-other"


@pytest.fixture(autouse=True)
def clean_tickets() -> Iterator[None]:
    handlers.TICKETS.clear()
    yield
    handlers.TICKETS.clear()


async def run_worker(db: Database, settings: Settings) -> int:
    built = build_worker(db=db, settings=settings, handler=handlers.journaled, concurrency=2)
    return await built.worker.run_until_idle()


async def waiting_run(db: Database, settings: Settings, project: str = P) -> ApprovalTicket:
    """A run whose handler asked for approval ``go`` (a worker ran it until then)."""
    [run_id] = await create_runs(db, project, payload={"approval": True})
    assert await run_worker(db, settings) == 1
    assert (await load(db, project, run_id)).status == "WAITING_APPROVAL"
    [ticket] = [t for t in handlers.TICKETS if t.run_id == run_id]
    return ticket


async def log_in(http: httpx.AsyncClient, token: str) -> str:
    await console.log_in(http, token)
    return console.csrf_of(await http.get("/ui/runs"))


async def approval_row(db: Database, run_id: uuid.UUID) -> dict[str, Any]:
    async with db.platform() as conn:
        row = await conn.fetchrow("SELECT * FROM awooop_approvals WHERE run_id = $1", run_id)
    assert row is not None
    return dict(row.items())


async def last_metadata(db: Database, project: str, run_id: uuid.UUID) -> Any:
    async with db.tenant(project) as conn:
        return await conn.fetchval(
            "SELECT metadata FROM awooop_events"
            " WHERE stream_id = $1 AND event_type LIKE 'Approval%' ORDER BY version DESC LIMIT 1",
            run_stream_id(run_id),
        )


async def test_a_manage_session_approves_with_a_name_and_the_run_completes(
    settings: Settings, fast: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    ticket = await waiting_run(db, fast)
    run_id, page_url = ticket.run_id, f"/ui/runs/{P}/{ticket.run_id}"
    async with app_client(settings, db) as http:
        csrf = await log_in(http, manage)
        page = await http.get(page_url)
        assert 'id="approve"' in page.text and 'id="reject"' in page.text
        assert 'name="by" value="" required' in page.text and 'name="token"' not in page.text
        nameless = await http.post(f"{page_url}/approve", data={"csrf": csrf, "by": " "})
        assert nameless.status_code == 400 and "E-INPUT-001" in nameless.text
        assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"  # nothing written

        done = await http.post(f"{page_url}/approve", data={"csrf": csrf, "by": "Alice Ng"})
        assert done.status_code == 303
        assert (await load(db, P, run_id)).status == "RESUMED"
        shown = await http.get(page_url)
        assert "approve: the run is RESUMED" in shown.text
        approvals_table = shown.text.split('id="approvals"')[1]
        assert f'<span class="by">Alice Ng</span> (manage-token:{manage_id})' in approvals_table

        again = await http.post(f"{page_url}/approve", data={"csrf": csrf, "by": "Bob"})
        assert again.status_code == 409 and "E-APPROVAL-003" in again.text
    # The notifier's token is spent too: single use, whoever decided.
    with pytest.raises(ApprovalTokenUsedError):
        await db.in_tenant(
            P,
            lambda c: approvals.decide(c, run_id, ticket.token, Decision.APPROVED, actor="x"),
        )
    granted = (await events_of(db, P, run_id))[-1]
    assert granted == ApprovalGranted(
        at=granted.at, actor=f"manage-token:{manage_id}", by="Alice Ng"
    )
    assert await last_metadata(db, P, run_id) == {
        "actor": f"manage-token:{manage_id}",
        "via": "console",
    }
    row = await approval_row(db, run_id)
    assert (row["decision"], row["actor"], row["decided_by"]) == (
        "approved",
        f"manage-token:{manage_id}",
        "Alice Ng",
    )
    assert row["used_at"] is not None

    assert await run_worker(db, fast) == 1
    done_state = await load(db, P, run_id)
    assert done_state.status == "COMPLETED" and done_state.result == {"one": 41, "two": 42}
    grant = done_state.saga_steps["approval:go"]["result"]
    assert (grant["actor"], grant["by"]) == (f"manage-token:{manage_id}", "Alice Ng")

    args = build_parser().parse_args(["runs", "show", P, str(run_id)])
    assert await args.run(settings, args) == 0
    [granted_line] = [ln for ln in capsys.readouterr().out.splitlines() if "ApprovalGranted" in ln]
    assert '"by":"Alice Ng"' in granted_line


async def test_the_name_is_remembered_for_the_next_decision(
    settings: Settings, fast: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    first, second = await waiting_run(db, fast), await waiting_run(db, fast)
    async with app_client(settings, db) as http:
        csrf = await log_in(http, manage)
        url = f"/ui/runs/{P}/{first.run_id}/approve"
        assert (await http.post(url, data={"csrf": csrf, "by": "Dana"})).status_code == 303
        page = await http.get(f"/ui/runs/{P}/{second.run_id}")
        assert 'name="by" value="Dana" required' in page.text


async def test_a_manage_session_rejects_with_a_reason(
    settings: Settings, fast: Settings, db: Database
) -> None:
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    ticket = await waiting_run(db, fast)
    async with app_client(settings, db) as http:
        csrf = await log_in(http, manage)
        done = await http.post(
            f"/ui/runs/{P}/{ticket.run_id}/reject",
            data={"csrf": csrf, "by": "Bob", "reason": "not today"},
        )
        assert done.status_code == 303
        page = await http.get(f"/ui/runs/{P}/{ticket.run_id}")
        assert '<span class="by">Bob</span>' in page.text.split('id="approvals"')[1]
    state = await load(db, P, ticket.run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-APPROVAL-004")
    assert state.failure_reason == f"Approval rejected by Bob (manage-token:{manage_id}): not today"
    rejected = (await events_of(db, P, ticket.run_id))[-1]
    assert rejected == ApprovalRejected(
        at=rejected.at, actor=f"manage-token:{manage_id}", reason="not today", by="Bob"
    )
    row = await approval_row(db, ticket.run_id)
    assert (row["decision"], row["decided_by"]) == ("rejected", "Bob")


async def test_an_admin_session_decides_any_projects_run(
    settings: Settings, fast: Settings, db: Database
) -> None:
    admin_id, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    ticket = await waiting_run(db, fast, Q)
    async with app_client(settings, db) as http:
        csrf = await log_in(http, admin)
        done = await http.post(
            f"/ui/runs/{Q}/{ticket.run_id}/approve", data={"csrf": csrf, "by": "Root"}
        )
        assert done.status_code == 303
    row = await approval_row(db, ticket.run_id)
    assert (row["actor"], row["decided_by"]) == (f"admin-token:{admin_id}", "Root")
    assert (await load(db, Q, ticket.run_id)).status == "RESUMED"


async def test_a_read_session_and_another_projects_session_are_refused(
    settings: Settings, fast: Settings, db: Database
) -> None:
    _, read = await credentials.create_management_token(db, P, "read")
    _, other = await credentials.create_management_token(db, Q, "manage")
    ticket = await waiting_run(db, fast)
    url = f"/ui/runs/{P}/{ticket.run_id}"
    async with app_client(settings, db) as http:
        csrf = await log_in(http, read)
        page = await http.get(url)
        assert page.status_code == 200 and 'id="approve"' not in page.text
        refused = await http.post(f"{url}/approve", data={"csrf": csrf, "by": "Eve"})
        assert refused.status_code == 403 and "E-AUTH-004" in refused.text
    async with app_client(settings, db) as http:
        csrf = await log_in(http, other)
        assert (await http.get(url)).status_code == 403
        refused = await http.post(f"{url}/approve", data={"csrf": csrf, "by": "Eve"})
        assert refused.status_code == 403 and "E-AUTH-002" in refused.text
        # Its own project in the path, another project's run: not found (row-level security).
        hidden = await http.post(
            f"/ui/runs/{Q}/{ticket.run_id}/approve", data={"csrf": csrf, "by": "Eve"}
        )
        assert hidden.status_code == 404
    assert (await load(db, P, ticket.run_id)).status == "WAITING_APPROVAL"
    row = await approval_row(db, ticket.run_id)
    assert (row["used_at"], row["decided_by"]) == (None, None)


async def blocked_on_a_lock(db: Database) -> bool:
    async with db.platform() as conn:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    return bool(waiting)


@pytest.mark.parametrize("first", ["session", "token"])
async def test_a_token_decision_and_a_session_decision_at_once_exactly_one_wins(
    settings: Settings, fast: Settings, db: Database, first: str
) -> None:
    """The first decision holds the approval row's lock (its transaction not committed yet)
    while the other one starts and waits for it; when the first commits, the other finds the
    request decided (E-APPROVAL-003) and writes nothing."""
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    ticket = await waiting_run(db, fast)
    run_id = ticket.run_id

    async def by_token(conn: Any) -> Any:
        return await approvals.decide(conn, run_id, ticket.token, Decision.APPROVED, actor="tok")

    async def by_session(conn: Any) -> Any:
        return await approvals.decide_as(
            conn, run_id, Decision.REJECTED, actor=f"manage-token:{manage_id}", by="Sam"
        )

    async with app_client(settings, db) as http:
        csrf = await log_in(http, manage)

        async def session_post() -> httpx.Response:
            return await http.post(
                f"/ui/runs/{P}/{run_id}/reject", data={"csrf": csrf, "by": "Sam"}
            )

        async with db.tenant(P) as conn:
            if first == "session":
                await by_session(conn)
                second: asyncio.Task[Any] = asyncio.create_task(
                    db.in_tenant(P, by_token)  # waits for the row lock
                )
            else:
                await by_token(conn)
                second = asyncio.create_task(session_post())
            await eventually(lambda: blocked_on_a_lock(db), what="the second decision waiting")
            assert not second.done()
        # The first committed as its block ended: the second now finds the request decided.
        if first == "session":
            with pytest.raises(ApprovalTokenUsedError):
                await second
        else:
            answer = await second
            assert answer.status_code == 409 and "E-APPROVAL-003" in answer.text
    types = [type(e).__name__ for e in await events_of(db, P, run_id)]
    assert types.count("ApprovalGranted") + types.count("ApprovalRejected") == 1
    row = await approval_row(db, run_id)
    expected = ("rejected", "Sam") if first == "session" else ("approved", None)
    assert (row["decision"], row["decided_by"]) == expected
    status = (await load(db, P, run_id)).status
    assert status == ("FAILED" if first == "session" else "RESUMED")


async def test_gathered_token_and_session_decisions_make_one_decision(
    settings: Settings, fast: Settings, db: Database
) -> None:
    """Without arranging who goes first: of the two, exactly one succeeds."""
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    ticket = await waiting_run(db, fast)

    async with app_client(settings, db) as http:
        csrf = await log_in(http, manage)
        token_try = db.in_tenant(
            P,
            lambda c: approvals.decide(
                c, ticket.run_id, ticket.token, Decision.APPROVED, actor="tok"
            ),
        )
        session_try = http.post(
            f"/ui/runs/{P}/{ticket.run_id}/approve", data={"csrf": csrf, "by": "Sam"}
        )
        by_token, by_session = await asyncio.gather(token_try, session_try, return_exceptions=True)
    token_won = not isinstance(by_token, BaseException)
    assert isinstance(by_session, httpx.Response)
    session_won = by_session.status_code == 303
    assert token_won != session_won, (by_token, by_session.status_code)
    if not token_won:
        assert isinstance(by_token, ApprovalTokenUsedError)
    else:
        assert by_session.status_code == 409 and "E-APPROVAL-003" in by_session.text
    types = [type(e).__name__ for e in await events_of(db, P, ticket.run_id)]
    assert types.count("ApprovalGranted") == 1
    row = await approval_row(db, ticket.run_id)
    assert row["decided_by"] == (None if token_won else "Sam")
    assert row["actor"] == ("tok" if token_won else f"manage-token:{manage_id}")


async def test_the_management_api_decides_with_by_instead_of_the_token(
    settings: Settings, fast: Settings, db: Database
) -> None:
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    _, read = await credentials.create_management_token(db, P, "read")
    ticket = await waiting_run(db, fast)
    url = f"/v1/projects/{P}/runs/{ticket.run_id}/approve"
    async with app_client(settings, db, bearer=read) as api:
        refused = await api.post(url, json={"by": "carol"})
        assert (refused.status_code, refused.json()["code"]) == (403, "E-AUTH-004")
    async with app_client(settings, db, bearer=manage) as api:
        for bad in (
            {},
            {"by": ""},
            {"token": ticket.token, "by": "carol"},
            {"by": "c", "actor": "d"},
        ):
            answer = await api.post(url, json=bad)
            assert (answer.status_code, answer.json()["code"]) == (400, "E-INPUT-001"), bad
        assert (await load(db, P, ticket.run_id)).status == "WAITING_APPROVAL"
        done = await api.post(url, json={"by": "carol"})
        assert done.status_code == 200 and done.json()["status"] == "RESUMED"
        again = await api.post(url, json={"token": ticket.token})
        assert (again.status_code, again.json()["code"]) == (409, "E-APPROVAL-003")
    granted = (await events_of(db, P, ticket.run_id))[-1]
    assert (granted.actor, granted.by) == (f"manage-token:{manage_id}", "carol")
    assert await last_metadata(db, P, ticket.run_id) == {"actor": f"manage-token:{manage_id}"}


async def test_the_cli_decides_for_a_person_without_the_token(
    settings: Settings, fast: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    approve, reject = await waiting_run(db, fast), await waiting_run(db, fast)
    parser = build_parser()
    both = parser.parse_args(
        ["runs", "approve", str(approve.run_id), "--by", "Ann", "--token", "x"]
    )
    with pytest.raises(InvalidInputError, match="not both"):
        await both.run(settings, both)
    args = parser.parse_args(["runs", "approve", str(approve.run_id), "--by", "Ann Lee"])
    assert await args.run(settings, args) == 0
    args = parser.parse_args(
        ["runs", "reject", P, str(reject.run_id), "--by", "Bo", "--reason", "wrong draft"]
    )
    assert await args.run(settings, args) == 0
    assert (await approval_row(db, approve.run_id))["decided_by"] == "Ann Lee"
    assert (await load(db, P, reject.run_id)).status == "FAILED"
    [granted] = [
        e for e in await events_of(db, P, approve.run_id) if isinstance(e, ApprovalGranted)
    ]
    assert granted.by == "Ann Lee" and granted.actor.startswith("cli:")
    # The token the notifier holds is spent by the decision: single use either way.
    late = parser.parse_args(["runs", "approve", str(approve.run_id), "--token", approve.token])
    with pytest.raises(ApprovalTokenUsedError):
        await late.run(settings, late)
