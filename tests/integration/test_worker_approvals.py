"""Approvals on real Postgres, through the library and the HTTP routes (R-14)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import (
    ApprovalExpiredError,
    ApprovalTokenInvalidError,
    ApprovalTokenUsedError,
    IllegalTransitionError,
)
from awooop.ingest import credentials
from awooop.loops.runs import expire_approvals_once, reap_once
from awooop.runs import approvals, control, leases
from awooop.runs.approvals import ApprovalTicket, Decision
from tests.support.http import app_client
from tests.support.runs import create_runs, event_types, load

P = "proj-ap"


async def waiting(db: Database, ttl_s: float = 900, name: str = "go") -> ApprovalTicket:
    [run_id] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "w1", 30)) is not None
    return await db.in_tenant(
        P, lambda c: approvals.request(c, run_id, "w1", 1, name=name, reason="why", ttl_s=ttl_s)
    )


async def decide(
    db: Database, ticket: ApprovalTicket, decision: Decision, token: str | None = None
) -> str:
    state = await db.in_tenant(
        P,
        lambda c: approvals.decide(
            c, ticket.run_id, token or ticket.token, decision, actor="alice", reason="because"
        ),
    )
    return str(state.status)


async def rows_of(db: Database, run_id: uuid.UUID) -> list[dict[str, object]]:
    async with db.platform() as conn:
        rows = await conn.fetch("SELECT * FROM awooop_approvals WHERE run_id = $1", run_id)
    return [dict(r.items()) for r in rows]


async def test_the_token_is_stored_only_as_a_hash(db: Database) -> None:
    ticket = await waiting(db)
    [row] = await rows_of(db, ticket.run_id)
    assert row["token_hash"] == approvals.hash_token(ticket.token)
    assert ticket.token not in str(row)
    state = await load(db, P, ticket.run_id)
    assert state.status == "WAITING_APPROVAL" and state.approval_expires_at == ticket.expires_at
    assert (ticket.expires_at - state.updated_at).total_seconds() == pytest.approx(900)


async def test_approve_resumes_and_a_second_use_is_refused(db: Database) -> None:
    ticket = await waiting(db)
    assert await decide(db, ticket, Decision.APPROVED) == "RESUMED"
    with pytest.raises(ApprovalTokenUsedError) as used:
        await decide(db, ticket, Decision.APPROVED)
    assert used.value.code == "E-APPROVAL-003"
    with pytest.raises(ApprovalTokenUsedError):
        await decide(db, ticket, Decision.REJECTED)
    assert await event_types(db, P, ticket.run_id) == [
        "RunCreated",
        "RunClaimed",
        "ApprovalRequested",
        "ApprovalGranted",
    ]
    [row] = await rows_of(db, ticket.run_id)
    assert (row["decision"], row["actor"]) == ("approved", "alice")


async def test_reject_fails_the_run(db: Database) -> None:
    ticket = await waiting(db)
    assert await decide(db, ticket, Decision.REJECTED) == "FAILED"
    state = await load(db, P, ticket.run_id)
    assert state.failure_code == "E-APPROVAL-004"
    assert state.failure_reason == "Approval rejected by alice: because"


async def test_unknown_or_foreign_tokens_are_refused_and_write_nothing(db: Database) -> None:
    ticket = await waiting(db)
    other = await waiting(db)
    for token, run_ticket in (("nope", ticket), (other.token, ticket)):
        with pytest.raises(ApprovalTokenInvalidError):
            await decide(db, run_ticket, Decision.APPROVED, token=token)
    assert (await load(db, P, ticket.run_id)).status == "WAITING_APPROVAL"
    assert (await load(db, P, other.run_id)).status == "WAITING_APPROVAL"
    assert all(r["used_at"] is None for r in await rows_of(db, ticket.run_id))


async def test_an_expired_token_fails_the_run_through_the_loop(db: Database) -> None:
    ticket = await waiting(db, ttl_s=0.1)
    await asyncio.sleep(0.2)  # the token expires
    with pytest.raises(ApprovalExpiredError) as late:
        await decide(db, ticket, Decision.APPROVED)
    assert late.value.code == "E-APPROVAL-002"
    assert (await load(db, P, ticket.run_id)).status == "WAITING_APPROVAL"  # refusal wrote nothing
    assert await reap_once(db) == (0, 0)  # never reaped
    assert await expire_approvals_once(db) == 1
    state = await load(db, P, ticket.run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-APPROVAL-002")
    [row] = await rows_of(db, ticket.run_id)
    assert row["decision"] == "expired"
    with pytest.raises(ApprovalExpiredError):
        await decide(db, ticket, Decision.APPROVED)
    assert await expire_approvals_once(db) == 0


async def test_a_token_for_a_cancelled_run_is_refused(db: Database) -> None:
    ticket = await waiting(db)
    await db.in_tenant(P, lambda c: control.cancel(c, ticket.run_id, actor="ops"))
    with pytest.raises(IllegalTransitionError):
        await decide(db, ticket, Decision.APPROVED)
    assert all(r["used_at"] is None for r in await rows_of(db, ticket.run_id))


async def test_tenants_cannot_spend_each_others_tokens(db: Database) -> None:
    ticket = await waiting(db)
    with pytest.raises(ApprovalTokenInvalidError):
        await db.in_tenant(
            "another-project",
            lambda c: approvals.decide(
                c, ticket.run_id, ticket.token, Decision.APPROVED, actor="x"
            ),
        )


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    _, manage = await credentials.create_management_token(db, P, "manage")  # the project's
    async with app_client(settings, db, bearer=manage) as http:
        yield http


async def test_http_approve_then_reuse(db: Database, client: httpx.AsyncClient) -> None:
    ticket = await waiting(db)
    url = f"/v1/projects/{P}/runs/{ticket.run_id}"
    first = await client.post(f"{url}/approve", json={"token": ticket.token, "actor": "alice"})
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "RESUMED"
    again = await client.post(f"{url}/approve", json={"token": ticket.token})
    assert (again.status_code, again.json()["code"]) == (409, "E-APPROVAL-003")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"not json", 400, "E-INPUT-001"),
        (b'{"token": 5}', 400, "E-INPUT-001"),
        (b'{"token": "x", "extra": 1}', 400, "E-INPUT-001"),
        (b'{"token": "wrong"}', 403, "E-APPROVAL-001"),
    ],
)
async def test_http_bad_requests_write_nothing(
    db: Database, client: httpx.AsyncClient, body: bytes, status: int, code: str
) -> None:
    ticket = await waiting(db)
    answer = await client.post(
        f"/v1/projects/{P}/runs/{ticket.run_id}/reject",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert (await load(db, P, ticket.run_id)).status == "WAITING_APPROVAL"


async def test_http_expired_and_unknown_run(db: Database, client: httpx.AsyncClient) -> None:
    ticket = await waiting(db, ttl_s=0.05)
    await asyncio.sleep(0.1)  # the token expires
    late = await client.post(
        f"/v1/projects/{P}/runs/{ticket.run_id}/approve", json={"token": ticket.token}
    )
    assert (late.status_code, late.json()["code"]) == (410, "E-APPROVAL-002")
    missing = await client.post(f"/v1/projects/{P}/runs/not-a-uuid/approve", json={"token": "x"})
    assert (missing.status_code, missing.json()["code"]) == (404, "E-RUN-003")
    assert msgspec.json.decode(late.content)["message"]


async def test_http_cancel_needs_a_management_token_of_the_project(
    db: Database, client: httpx.AsyncClient
) -> None:
    [run_id] = await create_runs(db, P)
    _, ingest = await credentials.create_token(db, P, "api")
    _, foreign = await credentials.create_management_token(db, "other-project", "manage")
    url = f"/v1/projects/{P}/runs/{run_id}/cancel"
    for auth, status, code in (
        ("", 401, "E-AUTH-001"),
        ("Bearer x", 401, "E-AUTH-001"),
        (f"Bearer {ingest}", 403, "E-AUTH-003"),
        (f"Bearer {foreign}", 403, "E-AUTH-002"),
    ):
        refused = await client.post(url, json={"reason": "stop"}, headers={"authorization": auth})
        assert (refused.status_code, refused.json()["code"]) == (status, code), auth
    assert (await load(db, P, run_id)).status == "PENDING"
    bad = await client.post(url, content=b"[")
    assert (bad.status_code, bad.json()["code"]) == (400, "E-INPUT-001")
    done = await client.post(url, json={"actor": "ops", "reason": "stop"})
    assert done.status_code == 200 and done.json()["status"] == "CANCELLED"
    assert done.json()["failure_reason"] == "stop"
    again = await client.post(url, json={})
    assert (again.status_code, again.json()["code"]) == (409, "E-RUN-001")
    assert (await event_types(db, P, run_id))[-1] == "RunCancelled"
