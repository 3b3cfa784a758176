"""Budgets in cost: a call reserves its maximum tokens at the higher of its model's two prices
and settles to its reported tokens at their prices, on the same reservation rows as a token
budget, so exactly the calls that fit run under concurrency, a crashed attempt's reservation is
released uncharged and a call replayed from the journal charges nothing. A model without a
price under a budget in cost is refused (E-BUDGET-004) and nothing is reserved. Real worker,
real gateway with the local model, Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import PriceNotFoundError
from awooop.llm import flow_store
from awooop.llm.admission import FlowGate
from awooop.llm.client import ModelRequest
from awooop.llm.flow_rules import BudgetUnit, OnExceed, cost_of
from awooop.llm.gateway import ModelGateway
from awooop.runs import approvals, leases
from awooop.runs.approvals import Decision
from awooop.worker.runtime import Worker
from tests.integration.test_llm_budgets import model_calls
from tests.integration.test_model_calls import open_gateway
from tests.support import handlers
from tests.support.runs import create_runs, load

P = "proj-llm-budget"  # the project of test_llm_budgets.model_calls
IN, OUT = 3, 2  # "a b c": 3 input words, and the local model's answer is 2 words


@pytest.fixture
async def gateway(settings: Settings, db: Database) -> AsyncIterator[ModelGateway]:
    gw, services = await open_gateway(settings, db)
    yield gw
    await gw.close()
    await services.redis.aclose()


async def price(db: Database, model: str, pin: str, pout: str) -> None:
    async with db.tenant(P) as conn:
        await flow_store.set_price(conn, P, model, input_price=pin, output_price=pout, actor="t")


async def cost_budget(db: Database, cost: int, on_exceed: OnExceed, model: str = "") -> None:
    async with db.tenant(P) as conn:
        await flow_store.set_budget(
            conn,
            P,
            model,
            cost=cost,
            period_s=86400,
            reserve_tokens=50,
            on_exceed=on_exceed,
            actor="test",
        )


async def usage(db: Database) -> dict[str, Any]:
    async with db.tenant(P) as conn:
        [budget] = await flow_store.budgets(conn, P)
        states = dict(
            await conn.fetch(
                "SELECT state, count(*) FROM awooop_llm_reservations WHERE unit = 'cost' "
                "GROUP BY state"
            )
        )
    assert budget.unit is BudgetUnit.COST
    return {"used": budget.used, "reserved": budget.reserved, "calls": budget.calls, "rows": states}


def worker(db: Database, settings: Settings, gateway: ModelGateway, n: int, **kw: Any) -> Worker:
    return Worker(
        db=db, settings=settings, handler=handlers.model_calls, llm=gateway, concurrency=n, **kw
    )


@pytest.mark.connections(26)
async def test_exactly_the_calls_that_fit_a_cost_budget_run_under_50_concurrent_runs(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    # 2.4 credits per 1,000 tokens either way: a call of 5 tokens costs 12 credits and
    # reserves 12 (max_tokens 5 at the higher price), so 10 calls fit 120 credits exactly.
    await price(db, settings.llm_default_model, "2400", "2400")
    await cost_budget(db, 120, OnExceed.FAIL)
    run_ids = await create_runs(db, P, 50, payload={"max_tokens": IN + OUT})
    assert await worker(db, settings, gateway, 50).run_until_idle(max_s=120) == 50
    results = [(await load(db, P, r)).result for r in run_ids]
    refused = [r["refused"] for r in results if "refused" in r]
    assert (50 - len(refused), set(refused)) == (10, {"E-BUDGET-001"})
    ok = [c for c in await model_calls(db, run_ids) if c.outcome == "ok"]
    assert len(ok) == 10
    assert (
        sum(cost_of(c.input_tokens, c.output_tokens, Decimal(2400), Decimal(2400)) for c in ok)
        == 120
    )
    assert await usage(db) == {"used": 120, "reserved": 0, "calls": 10, "rows": {"settled": 10}}


async def test_a_call_reserves_at_the_higher_price_and_settles_at_both(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    # Input 2 credits per token, output 3: a call costs 3*2 + 2*3 = 12 and reserves 5*3 = 15.
    # One at a time: call n+1 starts while 12n + 15 <= 100, so 8 calls run and 96 is used.
    await price(db, settings.llm_default_model, "2000", "3000")
    await cost_budget(db, 100, OnExceed.FAIL)
    [run_id] = await create_runs(db, P, payload={"calls": 10, "max_tokens": IN + OUT})
    assert await worker(db, settings, gateway, 1).run_until_idle(max_s=60) == 1
    result = (await load(db, P, run_id)).result
    assert (result["refused"], len(result["answers"])) == ("E-BUDGET-001", 8)
    calls = await model_calls(db, [run_id])
    assert [(c.input_tokens, c.output_tokens) for c in calls if c.outcome == "ok"] == [(3, 2)] * 8
    assert "reserves 15" in calls[-1].reason and "96 of 100 credits used" in calls[-1].reason
    assert await usage(db) == {"used": 96, "reserved": 0, "calls": 8, "rows": {"settled": 8}}


async def test_a_call_replayed_from_the_journal_is_not_charged_again(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    await price(db, settings.llm_default_model, "2000", "3000")
    await cost_budget(db, 1000, OnExceed.FAIL)
    [run_id] = await create_runs(
        db, P, payload={"calls": 2, "journal": True, "approval": True, "max_tokens": 50}
    )
    w = worker(db, settings, gateway, 1, notifier=handlers.remember_ticket)
    await w.run_until_idle(max_s=60)
    assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"
    charged = {"used": 24, "reserved": 0, "calls": 2, "rows": {"settled": 2}}
    assert await usage(db) == charged
    [ticket] = [t for t in handlers.TICKETS if t.run_id == run_id]
    async with db.tenant(P) as conn:
        await approvals.decide(conn, run_id, ticket.token, Decision.APPROVED, actor="test")
    await w.run_until_idle(max_s=60)
    state = await load(db, P, run_id)
    assert (state.status, state.attempt_count) == ("COMPLETED", 2), state.failure_reason
    assert len(await model_calls(db, [run_id])) == 2
    assert await usage(db) == charged


async def test_the_reservation_of_an_attempt_that_lost_its_lease_is_released_not_charged(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    model = settings.llm_default_model
    await price(db, model, "2400", "2400")
    await cost_budget(db, 24, OnExceed.FAIL)
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
    request = ModelRequest(model=model, prompt="a b c", options={"max_tokens": 10})
    await gate.admit(1, request)  # 10 tokens at 2.4: the whole 24 credits, then it "dies"
    assert (await usage(db))["reserved"] == 24
    run_ids = await create_runs(db, P, 1, payload={"max_tokens": IN + OUT})
    w = worker(db, settings, gateway, 1)
    assert await w.run_until_idle(max_s=60) == 1
    assert (await load(db, P, run_ids[0])).result["refused"] == "E-BUDGET-001"
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
            "WHERE run_id = $1",
            ghost,
        )
    run_ids = await create_runs(db, P, 1, payload={"max_tokens": IN + OUT})
    assert await w.run_until_idle(max_s=60) == 2  # the ghost's run is retried too
    for run_id in (ghost, run_ids[0]):
        assert "refused" not in (await load(db, P, run_id)).result
    assert await usage(db) == {
        "used": 24,
        "reserved": 0,
        "calls": 2,
        "rows": {"settled": 2, "released": 1},
    }


async def test_a_model_without_a_price_under_a_cost_budget_is_refused_and_nothing_reserved(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    # A budget in cost of one model needs its price: refused, nothing written.
    with pytest.raises(PriceNotFoundError) as refused:
        await cost_budget(db, 100, OnExceed.FAIL, model=settings.llm_default_model)
    assert refused.value.code == "E-BUDGET-004"
    async with db.tenant(P) as conn:
        assert await flow_store.budgets(conn, P, history=True) == []
    # A project-wide one holds every model: a call to a model without a price is refused.
    await price(db, "another-model", "1", "1")
    await cost_budget(db, 100, OnExceed.FAIL)
    [run_id] = await create_runs(db, P, payload={"max_tokens": IN + OUT})
    assert await worker(db, settings, gateway, 1).run_until_idle(max_s=60) == 1
    assert (await load(db, P, run_id)).result["refused"] == "E-BUDGET-004"
    [call] = await model_calls(db, [run_id])
    assert call.outcome == "E-BUDGET-004" and "has no price" in call.reason
    async with db.tenant(P) as conn:
        rows = await conn.fetchval("SELECT count(*) FROM awooop_llm_reservations")
        counters = await conn.fetchval("SELECT count(*) FROM awooop_llm_budget_usage")
    assert (rows, counters) == (0, 0)
    # Priced, the same call runs and is charged.
    await price(db, settings.llm_default_model, "1000", "1000")
    [run_id] = await create_runs(db, P, payload={"max_tokens": IN + OUT})
    assert await worker(db, settings, gateway, 1).run_until_idle(max_s=60) == 1
    assert "refused" not in (await load(db, P, run_id)).result
    assert await usage(db) == {"used": 5, "reserved": 0, "calls": 1, "rows": {"settled": 1}}


@pytest.mark.connections(10)
async def test_a_token_budget_and_a_cost_budget_count_the_same_call_in_their_units(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    model = settings.llm_default_model
    await price(db, model, "2000", "3000")
    await cost_budget(db, 1000, OnExceed.FAIL, model=model)
    async with db.tenant(P) as conn:
        await flow_store.set_budget(
            conn,
            P,
            "",
            tokens=1000,
            period_s=86400,
            reserve_tokens=50,
            on_exceed=OnExceed.FAIL,
            actor="test",
        )
    run_ids = await create_runs(db, P, 3, payload={"max_tokens": IN + OUT})
    assert await worker(db, settings, gateway, 3).run_until_idle(max_s=60) == 3
    async with db.tenant(P) as conn:
        found = {b.unit: b for b in await flow_store.budgets(conn, P)}
        units = dict(
            await conn.fetch("SELECT unit, count(*) FROM awooop_llm_reservations GROUP BY 1")
        )
    assert (found[BudgetUnit.TOKENS].used, found[BudgetUnit.COST].used) == (15, 36)
    assert (found[BudgetUnit.TOKENS].reserved, found[BudgetUnit.COST].reserved) == (0, 0)
    assert units == {"tokens": 3, "cost": 3}
    for run_id in run_ids:
        assert "refused" not in (await load(db, P, run_id)).result
