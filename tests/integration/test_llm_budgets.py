"""Token budgets of model calls: a call reserves before it starts and settles with its
ModelCalled record, so exactly the calls that fit run under concurrency, and a call replayed
from the journal charges nothing. Real worker, real gateway with the local model, Postgres."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import ModelCalled, run_stream_id
from awooop.eventlog import eventlog
from awooop.llm import flow_store
from awooop.llm.admission import FlowGate
from awooop.llm.client import ModelRequest
from awooop.llm.flow_rules import OnExceed
from awooop.llm.gateway import ModelGateway
from awooop.runs import approvals, blocked_facts, leases
from awooop.runs.approvals import Decision
from awooop.services import Services
from awooop.worker.runtime import Worker
from tests.integration.test_model_calls import open_gateway
from tests.support import handlers
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually
from tests.support.workers import cli

P = "proj-llm-budget"
PER_CALL = 5  # "a b c": 3 input words, and the local model's answer is 2 words


@pytest.fixture
async def gateway(settings: Settings, db: Database) -> AsyncIterator[ModelGateway]:
    gw, services = await open_gateway(settings, db)
    yield gw
    await gw.close()
    await services.redis.aclose()


async def set_budget(db: Database, tokens: int, on_exceed: OnExceed, period_s: int = 86400) -> None:
    async with db.tenant(P) as conn:
        await flow_store.set_budget(
            conn,
            P,
            "",
            tokens=tokens,
            period_s=period_s,
            reserve_tokens=50,
            on_exceed=on_exceed,
            actor="test",
        )


async def usage(db: Database) -> dict[str, Any]:
    async with db.tenant(P) as conn:
        [budget] = await flow_store.budgets(conn, P)
        states = dict(
            await conn.fetch("SELECT state, count(*) FROM awooop_llm_reservations GROUP BY state")
        )
    return {"used": budget.used, "reserved": budget.reserved, "calls": budget.calls, "rows": states}


async def model_calls(db: Database, run_ids: list[Any]) -> list[ModelCalled]:
    found: list[ModelCalled] = []
    async with db.tenant(P) as conn:
        for run_id in run_ids:
            events = await eventlog.read_stream(conn, run_stream_id(run_id))
            found += [e.decode() for e in events if e.event_type == "ModelCalled"]
    return found


@pytest.mark.connections(26)
async def test_exactly_the_calls_that_fit_run_under_50_concurrent_runs(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    budget = 100  # 20 calls of 5 tokens, each reserving exactly what it uses
    await set_budget(db, budget, OnExceed.FAIL)
    run_ids = await create_runs(db, P, 50, payload={"max_tokens": PER_CALL})
    worker = Worker(
        db=db, settings=settings, handler=handlers.model_calls, llm=gateway, concurrency=50
    )
    assert await worker.run_until_idle(max_s=120) == 50
    results = [(await load(db, P, r)).result for r in run_ids]
    answered = [r for r in results if "refused" not in r]
    refused = [r["refused"] for r in results if "refused" in r]
    assert (len(answered), len(refused)) == (budget // PER_CALL, 50 - budget // PER_CALL)
    assert set(refused) == {"E-BUDGET-001"}
    calls = await model_calls(db, run_ids)
    ok = [c for c in calls if c.outcome == "ok"]
    assert len(ok) == budget // PER_CALL
    assert sum((c.input_tokens or 0) + (c.output_tokens or 0) for c in ok) == budget
    # The refused calls are recorded too, with their code and no tokens.
    assert sorted(c.outcome for c in calls if c.outcome != "ok") == ["E-BUDGET-001"] * 30
    assert await usage(db) == {"used": budget, "reserved": 0, "calls": 20, "rows": {"settled": 20}}


@pytest.mark.connections(11)
async def test_a_call_replayed_from_the_journal_is_not_charged_again(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    await set_budget(db, 1000, OnExceed.FAIL)
    [run_id] = await create_runs(
        db, P, payload={"calls": 2, "journal": True, "approval": True, "max_tokens": 50}
    )
    worker = Worker(
        db=db,
        settings=settings,
        handler=handlers.model_calls,
        llm=gateway,
        concurrency=1,
        notifier=handlers.remember_ticket,
    )
    await worker.run_until_idle(max_s=60)
    assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"
    assert await usage(db) == {"used": 10, "reserved": 0, "calls": 2, "rows": {"settled": 2}}
    [ticket] = [t for t in handlers.TICKETS if t.run_id == run_id]
    async with db.tenant(P) as conn:
        await approvals.decide(conn, run_id, ticket.token, Decision.APPROVED, actor="test")
    await worker.run_until_idle(max_s=60)
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    assert state.attempt_count == 2
    # The second attempt ran the handler from the top: both steps came from the journal.
    assert len(await model_calls(db, [run_id])) == 2
    assert await usage(db) == {"used": 10, "reserved": 0, "calls": 2, "rows": {"settled": 2}}
    # Rebuilding run_state from the log agrees with it and charges nothing: run state does not
    # depend on the budget rows.
    replayed = cli(settings, "replay", "run_state", "--verify")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "verify: no difference" in replayed.stdout
    assert await usage(db) == {"used": 10, "reserved": 0, "calls": 2, "rows": {"settled": 2}}


@pytest.mark.connections(11)
async def test_over_budget_waits_visibly_and_goes_when_the_budget_is_raised(
    db: Database, settings: Settings, gateway: ModelGateway, services: Services
) -> None:
    await set_budget(db, PER_CALL, OnExceed.WAIT, period_s=3600)
    run_ids = await create_runs(db, P, 2, payload={"max_tokens": PER_CALL})
    worker = Worker(
        db=db, settings=settings, handler=handlers.model_calls, llm=gateway, concurrency=2
    )
    burst = asyncio.create_task(worker.run_until_idle(max_s=120))
    try:

        async def reasons() -> list[str]:
            async with db.tenant(P) as conn:
                found = await blocked_facts.blocked_on(
                    conn, services.redis, services.keys, run_ids, settings.lease_ttl_s
                )
            return sorted("-" if b is None else b.reason.value for b in found.values())

        # One call fits and its run completes; the other waits, and blocked_on says why.
        await eventually(reasons, equals=["-", "over_budget"], what="one run over budget")
        async with db.tenant(P) as conn:
            found = await blocked_facts.blocked_on(
                conn, services.redis, services.keys, run_ids, settings.lease_ttl_s
            )
        [waiting] = [b for b in found.values() if b is not None]
        assert f"over_budget on awooop_llm:{P}" in waiting.summary
        # The wait's detail is the counter when the wait began: the first call's 5 tokens
        # settled ("5 of 5 tokens used") or, on a slow machine, still reserved ("0 of 5 tokens
        # used and 5 reserved"); either way the whole budget is taken.
        assert re.search(
            r"\b(5 of 5 tokens used|0 of 5 tokens used and 5 reserved)", waiting.summary
        )
        await set_budget(db, 2 * PER_CALL, OnExceed.WAIT, period_s=3600)
        assert await asyncio.wait_for(burst, 120) == 2
    finally:
        if not burst.done():
            burst.cancel()
    for run_id in run_ids:
        state = await load(db, P, run_id)
        assert state.status == "COMPLETED" and "refused" not in state.result
    assert await usage(db) == {"used": 10, "reserved": 0, "calls": 2, "rows": {"settled": 2}}
    async with db.tenant(P) as conn:
        waits = await conn.fetch("SELECT reason, wait_key, ended_at FROM awooop_llm_waits")
        history = await flow_store.budgets(conn, P, history=True)
    assert [(w["reason"], w["wait_key"]) for w in waits] == [("over_budget", f"awooop_llm:{P}")]
    assert waits[0]["ended_at"] is not None
    # Configuration with history: the first budget ended when the second was set.
    assert [(b.tokens, b.valid_to is None) for b in history] == [(10, True), (5, False)]


async def test_the_reservation_of_an_attempt_that_lost_its_lease_is_released_not_charged(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    await set_budget(db, 2 * PER_CALL, OnExceed.FAIL)
    [ghost] = await create_runs(db, P)
    async with db.tenant(P) as conn:
        await leases.claim(conn, ghost, "ghost", 30)
    gate = FlowGate(
        db,
        project_id=P,
        run_id=ghost,
        attempt=1,
        worker_id="ghost",
        check=lambda: None,
        max_wait_s=5,
    )
    request = ModelRequest(model="m", prompt="a b c", options={"max_tokens": 2 * PER_CALL})
    await gate.admit(1, request)  # the whole budget reserved, then the worker "dies"
    assert (await usage(db))["reserved"] == 2 * PER_CALL
    run_ids = await create_runs(db, P, 1, payload={"max_tokens": PER_CALL})
    worker = Worker(
        db=db, settings=settings, handler=handlers.model_calls, llm=gateway, concurrency=1
    )
    assert await worker.run_until_idle(max_s=60) == 1
    # While the ghost's lease is live its reservation stands: the call does not fit.
    assert (await load(db, P, run_ids[0])).result["refused"] == "E-BUDGET-001"
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
            "WHERE run_id = $1",
            ghost,
        )
    run_ids = await create_runs(db, P, 1, payload={"max_tokens": PER_CALL})
    # The ghost's run is retried too (its lease expired): two calls of 5, the whole budget.
    assert await worker.run_until_idle(max_s=60) == 2
    for run_id in (ghost, run_ids[0]):
        assert "refused" not in (await load(db, P, run_id)).result
    assert await usage(db) == {
        "used": 2 * PER_CALL,
        "reserved": 0,
        "calls": 2,
        "rows": {"settled": 2, "released": 1},
    }
