"""``run.wait_for_approval`` returns the same grant live and replayed (a later attempt runs the
handler from the top and replays the approvals it passed): who decided, and when."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.runs import approvals
from awooop.runs.approvals import ApprovalTicket, Decision
from awooop.worker.assembly import build_worker
from awooop.worker.context import RunContext
from tests.support.runs import create_runs, load

P = "proj-grants"
GRANTS: list[dict[str, Any]] = []  # every grant the handler was given: attempt, live or not
TICKETS: list[ApprovalTicket] = []


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    GRANTS.clear()
    TICKETS.clear()
    yield
    GRANTS.clear()
    TICKETS.clear()


async def remember(ticket: ApprovalTicket) -> None:
    TICKETS.append(ticket)


async def two_approvals(run: RunContext) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("first", "second"):
        replay = f"approval:{name}" in run.steps
        grant = await run.wait_for_approval(name, reason=name, notify=remember)
        GRANTS.append({"attempt": run.attempt, "replayed": replay, **asdict(grant)})
        out[name] = grant.decided_at.isoformat() if grant.decided_at else None
    return out


async def used_at(db: Database, run_id: uuid.UUID) -> dict[str, Any]:
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT name, used_at FROM awooop_approvals WHERE run_id = $1", run_id
        )
    return {r["name"]: r["used_at"] for r in rows}


async def test_a_replayed_approval_carries_who_decided_and_when(
    db: Database, fast: Settings
) -> None:
    [run_id] = await create_runs(db, P, payload={})
    worker = build_worker(db=db, settings=fast, handler=two_approvals, concurrency=1).worker
    assert await worker.run_until_idle() == 1
    # "first" is decided without the token: the token that acted and the person who decided.
    await db.in_tenant(
        P,
        lambda c: approvals.decide_as(c, run_id, Decision.APPROVED, actor="ops-token", by="bob"),
    )
    assert await worker.run_until_idle() == 1  # attempt 2: "first" live, then asks "second"
    [_, ticket] = TICKETS
    await db.in_tenant(
        P, lambda c: approvals.decide(c, run_id, ticket.token, Decision.APPROVED, actor="alice")
    )
    assert await worker.run_until_idle() == 1  # attempt 3: "first" replayed, "second" live
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state
    decided = await used_at(db, run_id)
    live_first, replayed_first, live_second = GRANTS
    assert (live_first["attempt"], live_first["replayed"]) == (2, False)
    assert (replayed_first["attempt"], replayed_first["replayed"]) == (3, True)
    assert live_second["replayed"] is False
    first = {"name": "first", "actor": "ops-token", "decided_at": decided["first"], "by": "bob"}
    assert {k: live_first[k] for k in first} == first
    assert {k: replayed_first[k] for k in first} == first  # the same grant, replayed
    assert live_second["decided_at"] == decided["second"] and live_second["actor"] == "alice"
    assert state.result == {
        "first": decided["first"].isoformat(),
        "second": decided["second"].isoformat(),
    }
