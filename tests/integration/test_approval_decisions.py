"""``run.wait_for_approval`` as a decision the handler acts on, on real Postgres and Redis: the
reviewer's reason and edited payload reach the handler; a rejection or an expiry the request
said to "return" resumes the run instead of failing it; a request's own expiry; the bounds; the
same decision replayed after a crash."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError, StepResultTooLargeError
from awooop.core.events import ApprovalGranted, ApprovalRejected, ApprovalRequested
from awooop.ingest import credentials
from awooop.loops.runs import expire_approvals_once
from awooop.projections.registry import get
from awooop.projections.replay import replay
from awooop.runs import approvals
from awooop.runs.approvals import Decision
from awooop.worker.assembly import build_worker
from tests.support import reviewed
from tests.support.http import app_client
from tests.support.runs import create_runs, events_of, load
from tests.support.waiting import eventually

P = "proj-decisions"
EDITED = {"to": "ann@example.com", "body": "shorter text"}


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    reviewed.DECISIONS.clear()
    reviewed.TICKETS.clear()
    yield
    reviewed.DECISIONS.clear()
    reviewed.TICKETS.clear()


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    _, manage = await credentials.create_management_token(db, P, "manage")
    async with app_client(settings, db, bearer=manage) as http:
        yield http


async def run_worker(db: Database, settings: Settings) -> int:
    built = build_worker(db=db, settings=settings, handler=reviewed.reviewed, concurrency=1)
    return await built.worker.run_until_idle()


async def asking(db: Database, settings: Settings, **options: Any) -> uuid.UUID:
    """A run of the reviewed handler that asked for approval ``send``."""
    [run_id] = await create_runs(db, P, payload=options)
    assert await run_worker(db, settings) == 1
    assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"
    return run_id


async def row_of(db: Database, run_id: uuid.UUID) -> dict[str, Any]:
    async with db.platform() as conn:
        row = await conn.fetchrow("SELECT * FROM awooop_approvals WHERE run_id = $1", run_id)
    assert row is not None
    return dict(row.items())


async def test_approve_with_a_reason_and_an_edit_the_handler_sends_the_edit(
    db: Database, fast: Settings, client: httpx.AsyncClient
) -> None:
    run_id = await asking(db, fast)
    [ticket] = reviewed.TICKETS
    assert ticket.payload == reviewed.DRAFT  # the notifier gets the draft
    body = {"token": ticket.token, "actor": "ann", "reason": "shorter", "payload": EDITED}
    answer = await client.post(f"/v1/projects/{P}/runs/{run_id}/approve", json=body)
    assert (answer.status_code, answer.json()["status"]) == (200, "RESUMED"), answer.text
    assert await run_worker(db, fast) == 1
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED"
    assert state.result == {"sent": EDITED, "why": "shorter"}
    [decision] = reviewed.DECISIONS
    assert (decision["approved"], decision["reason"], decision["payload"]) == (
        True,
        "shorter",
        EDITED,
    )
    granted = next(e for e in await events_of(db, P, run_id) if isinstance(e, ApprovalGranted))
    assert (granted.reason, granted.payload, granted.actor) == ("shorter", EDITED, "ann")
    assert decision["decided_at"] == granted.at


async def test_a_rejection_to_return_resumes_and_the_handler_takes_another_path(
    db: Database, fast: Settings, client: httpx.AsyncClient
) -> None:
    run_id = await asking(db, fast, on_reject="return")
    answer = await client.post(
        f"/v1/projects/{P}/runs/{run_id}/reject", json={"by": "Bo", "reason": "wrong person"}
    )
    assert (answer.status_code, answer.json()["status"]) == (200, "RESUMED"), answer.text
    assert await run_worker(db, fast) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == (
        "COMPLETED",
        {"held": True, "expired": False, "why": "wrong person"},
    )
    [decision] = reviewed.DECISIONS
    assert (decision["approved"], decision["expired"], decision["by"]) == (False, False, "Bo")
    rejected = (await events_of(db, P, run_id))[3]
    assert isinstance(rejected, ApprovalRejected) and rejected.resumed


async def test_a_rejection_by_default_fails_the_run_as_before(
    db: Database, fast: Settings, client: httpx.AsyncClient
) -> None:
    run_id = await asking(db, fast)
    answer = await client.post(
        f"/v1/projects/{P}/runs/{run_id}/reject", json={"by": "Bo", "reason": "no"}
    )
    assert (answer.status_code, answer.json()["status"]) == (200, "FAILED"), answer.text
    state = await load(db, P, run_id)
    assert (state.failure_code, state.failure_reason) == (
        "E-APPROVAL-004",
        answer.json()["failure_reason"],
    )
    assert await run_worker(db, fast) == 0 and reviewed.DECISIONS == []


async def test_a_requests_own_expiry_expires_it_and_the_handler_sees_it(
    db: Database, fast: Settings
) -> None:
    assert fast.approval_ttl_s >= 60  # the worker's expiry is far away
    run_id = await asking(db, fast, expires_s=1.5, on_expire="return")
    asked = next(e for e in await events_of(db, P, run_id) if isinstance(e, ApprovalRequested))
    assert (asked.expires_in_s, asked.on_expire, asked.payload) == (1.5, "return", reviewed.DRAFT)
    assert (asked.expires_at - asked.at).total_seconds() == pytest.approx(1.5)
    row = await row_of(db, run_id)
    assert row["expires_at"] == asked.expires_at and row["on_expire"] == "return"
    # The approval-expiry loop's pass, until the request's expiry has come.
    await eventually(lambda: expire_approvals_once(db), what="the request expired", equals=1)
    assert (await load(db, P, run_id)).status == "RESUMED"
    assert await run_worker(db, fast) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", {"held": True, "expired": True, "why": ""})
    [decision] = reviewed.DECISIONS
    assert (decision["approved"], decision["expired"], decision["actor"]) == (False, True, None)
    assert decision["decided_at"] == (await row_of(db, run_id))["used_at"]


@pytest.mark.connections(9)
async def test_the_decision_replayed_after_a_crash_is_the_same(
    db: Database, fast: Settings, database_url: str
) -> None:
    run_id = await asking(db, fast, crash=True, on_reject="return")
    await db.in_tenant(
        P,
        lambda c: approvals.decide_as(
            c, run_id, Decision.REJECTED, actor="t", by="Cy", reason="later", payload=EDITED
        ),
    )

    async def finished() -> str:
        await run_worker(db, fast)
        return str((await load(db, P, run_id)).status)

    await eventually(finished, what="the run completed after its crash", equals="COMPLETED")
    live, replayed = reviewed.DECISIONS
    assert (live["replayed"], replayed["replayed"]) == (False, True)
    assert replayed["attempt"] > live["attempt"]
    same = ("name", "approved", "expired", "reason", "payload", "actor", "by", "decided_at")
    assert {k: replayed[k] for k in same} == {k: live[k] for k in same}
    assert isinstance(live["decided_at"], datetime)
    assert (live["reason"], live["payload"], live["by"]) == ("later", EDITED, "Cy")
    # The run's state rebuilt from its events (the rejection that resumed it, the journaled
    # decision) is the state the runtime wrote.
    report = await replay(database_url, get("run_state"))
    assert report.differences == 0, report.lines()


async def test_bounds_are_refused_with_a_code_and_write_nothing(
    db: Database, fast: Settings, client: httpx.AsyncClient
) -> None:
    run_id = await asking(db, fast)
    url = f"/v1/projects/{P}/runs/{run_id}/approve"
    too_long = await client.post(url, json={"by": "Di", "reason": "x" * 2001})
    assert (too_long.status_code, too_long.json()["code"]) == (400, "E-INPUT-001")
    big = {"by": "Di", "payload": {"body": "y" * (fast.step_result_max_bytes + 1)}}
    too_big = await client.post(url, json=big)
    assert (too_big.status_code, too_big.json()["code"]) == (422, "E-DATA-002"), too_big.text
    with pytest.raises(StepResultTooLargeError):
        await db.in_tenant(
            P,
            lambda c: approvals.decide_as(
                c,
                run_id,
                Decision.APPROVED,
                actor="t",
                by="Di",
                payload="z" * 200,
                payload_max_bytes=100,
            ),
        )
    with pytest.raises(InvalidInputError):
        await db.in_tenant(
            P,
            lambda c: approvals.decide_as(
                c, run_id, Decision.APPROVED, actor="t", by="D", reason="r" * 2001
            ),
        )
    assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"
    row = await row_of(db, run_id)
    assert (row["used_at"], row["decision_reason"], row["edited_payload"]) == (None, "", None)


async def test_an_edit_equal_to_the_draft_is_no_edit(
    db: Database, fast: Settings, client: httpx.AsyncClient
) -> None:
    run_id = await asking(db, fast)
    body = {"by": "Ed", "payload": reviewed.DRAFT}
    answer = await client.post(f"/v1/projects/{P}/runs/{run_id}/approve", json=body)
    assert answer.status_code == 200, answer.text
    assert await run_worker(db, fast) == 1
    [decision] = reviewed.DECISIONS
    assert decision["payload"] is None
    assert (await load(db, P, run_id)).result == {"sent": reviewed.DRAFT, "why": ""}
