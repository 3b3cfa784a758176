"""Flow control of model calls across worker processes (the real CLI, real Postgres and Redis):
a rate limit holds across three workers, and a token budget and a budget in cost (on the
same calls, both spent at exactly 8 calls) let exactly the calls that fit run under 12
concurrent runs while a worker is killed with SIGKILL in the middle of its calls (the 50-run
exactness is tests/integration/test_llm_budgets.py and test_llm_cost_budgets.py, in one
process).
The 60 s figure of the rate limit is ops/bench/llm_rate_limit.py."""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import ModelCalled, run_stream_id
from awooop.eventlog import eventlog
from awooop.llm import flow_store
from awooop.llm.flow_rules import BudgetUnit, OnExceed, cost_of
from tests.support.connections import fit_workers
from tests.support.runs import all_finished, create_runs, load
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, workers

P = "proj-llm-flow"
HANDLER = "tests.support.handlers:model_calls"
PER_CALL = 5  # "a b c": 3 input words, and the local model's answer is 2 words
PRICE = Decimal(2400)  # credits per 1,000 tokens, in and out: a call reserves and costs 12

pytestmark = pytest.mark.fast("processes")


async def model_calls(db: Database, run_ids: list[uuid.UUID]) -> list[ModelCalled]:
    found: list[ModelCalled] = []
    async with db.tenant(P) as conn:
        for run_id in run_ids:
            events = await eventlog.read_stream(conn, run_stream_id(run_id))
            found += [e.decode() for e in events if e.event_type == "ModelCalled"]
    return found


def crowded(
    fast: Settings, granted: int, processes: int, concurrency: int, **changes: Any
) -> Settings:
    # Processes share two cores with other tests: a longer lease, so a starved event loop does
    # not lose it.
    roomy = msgspec.structs.replace(fast, lease_ttl_s=6.0, heartbeat_interval_s=1.0, **changes)
    return fit_workers(roomy, processes, concurrency=concurrency, granted=granted, others=1)


@pytest.mark.long(20)
@pytest.mark.connections(40)
async def test_a_rate_limit_of_10_per_second_holds_across_three_workers(
    db: Database, fast: Settings, tmp_path: Path, pg_connections: int
) -> None:
    rate, window_s = 10, 10.0
    async with db.tenant(P) as conn:
        await flow_store.set_limit(conn, P, "", limit=rate, period_s=1.0, burst=1, actor="test")
    settings = crowded(fast, pg_connections, 3, 10)
    with workers(
        settings,
        tmp_path,
        3,
        handler=HANDLER,
        args=("--concurrency", "10"),
        env={"AWOOOP_LOG_LEVEL": "warning"},
    ) as procs:
        for proc in procs:
            proc.worker_id()
        # 180 calls: 18 s of demand at 10/s, all of it queued on the limit (30 slots in use).
        run_ids = await create_runs(db, P, 30, payload={"calls": 6})
        await eventually(lambda: all_finished(db, run_ids), timeout_s=180, what="180 calls")
    calls = [c for c in await model_calls(db, run_ids) if c.outcome == "ok"]
    assert len(calls) == 180
    assert len({c.worker_id for c in calls}) == 3  # the limit was shared by three processes
    starts = sorted(c.started_at for c in calls)
    # A window in the middle of the queue (the calls start when their token is due): the
    # bucket refills 10 tokens a second and holds at most 1, so the window holds 10 per second
    # give or take the lateness of a wake-up at its two edges (10 % of 100 is 10 calls).
    begin = starts[0] + timedelta(seconds=2)
    end = begin + timedelta(seconds=window_s)
    assert starts[-1] > end, "the calls did not fill the window"
    inside = sum(1 for s in starts if begin <= s < end)
    assert rate * window_s * 0.9 <= inside <= rate * window_s * 1.1 + 1, inside
    # Over the whole run too: no more than the bucket allows between the first and last start.
    span_s = (starts[-1] - starts[0]).total_seconds()
    assert len(starts) - 1 <= rate * span_s * 1.1 + 1
    async with db.tenant(P) as conn:
        [limit] = await flow_store.limits(conn, P)
    assert limit.granted == 180  # one token per call, counted by the bucket itself
    for run_id in run_ids:
        assert (await load(db, P, run_id)).status == "COMPLETED"


@pytest.mark.long(40)
@pytest.mark.connections(30)
async def test_a_budget_admits_exactly_the_calls_that_fit_through_a_kill_9_mid_call(
    db: Database, fast: Settings, tmp_path: Path, pg_connections: int
) -> None:
    fit, runs = 8, 12  # three workers of four runs each: all at once, a third of them refused
    budget, cost = fit * PER_CALL, fit * 12
    model = fast.llm_default_model
    async with db.tenant(P) as conn:
        await flow_store.set_budget(
            conn,
            P,
            "",
            tokens=budget,
            period_s=86400,
            reserve_tokens=50,
            on_exceed=OnExceed.WAIT,
            actor="test",
        )
        await flow_store.set_price(conn, P, model, input_price=PRICE, output_price=PRICE, actor="t")
        await flow_store.set_budget(
            conn,
            P,
            model,
            cost=cost,
            period_s=86400,
            reserve_tokens=50,
            on_exceed=OnExceed.WAIT,
            actor="test",
        )
    # Slow calls (1.5 s) so that the kill lands in the middle of some; the runs over budget
    # wait (blocked_on over_budget) up to 15 s, then end with E-BUDGET-002: long enough for
    # the killed attempts' leases (6 s) to run out and their reservations to be released to
    # the waiting calls. The killed worker's runs come back as suspects, one at a time per
    # worker, each waiting its 15 s once the budget is spent.
    settings = crowded(
        fast, pg_connections, 3, 4, llm_url="local:?delay_ms=1500", llm_flow_max_wait_s=15.0
    )
    with workers(
        settings,
        tmp_path,
        3,
        handler=HANDLER,
        args=("--concurrency", "4"),
        env={"AWOOOP_LOG_LEVEL": "warning"},
    ) as procs:
        ids = {p.worker_id(): p for p in procs}
        # Each run refused waits its 15 s: four of them keep the test under a minute.
        run_ids = await create_runs(db, P, runs, payload={"max_tokens": PER_CALL})

        async def in_flight() -> tuple[str, int] | None:
            async with db.platform() as conn:
                row = await conn.fetchrow(
                    "SELECT rs.worker_id, count(*) AS n FROM awooop_llm_reservations r "
                    "JOIN awooop_run_state rs ON rs.run_id = r.run_id "
                    "AND rs.attempt_count = r.attempt "
                    "WHERE r.state = 'reserved' GROUP BY 1 ORDER BY 2 DESC LIMIT 1"
                )
            return None if row is None else (row["worker_id"], row["n"])

        victim_id, _ = await eventually(in_flight, timeout_s=60, what="calls in flight")
        victim: WorkerProcess = ids[victim_id]
        os.kill(victim.pid, signal.SIGKILL)  # in the middle of its calls: nothing recorded
        victim.wait()
        await eventually(lambda: all_finished(db, run_ids), timeout_s=300, what="the runs")
    results = [(await load(db, P, r)) for r in run_ids]
    assert {s.status for s in results} == {"COMPLETED"}
    answered = [s for s in results if "refused" not in s.result]
    refused = Counter(s.result["refused"] for s in results if "refused" in s.result)
    assert (len(answered), refused) == (fit, Counter({"E-BUDGET-002": runs - fit}))
    calls = await model_calls(db, run_ids)
    ok = [c for c in calls if c.outcome == "ok"]
    assert len(ok) == fit
    assert sum((c.input_tokens or 0) + (c.output_tokens or 0) for c in ok) == budget
    assert sum(cost_of(c.input_tokens, c.output_tokens, PRICE, PRICE) for c in ok) == cost
    async with db.tenant(P) as conn:
        states = {b.unit: b for b in await flow_store.budgets(conn, P)}
        rows = {
            (r["unit"], r["state"]): r["n"]
            for r in await conn.fetch(
                "SELECT unit, state, count(*) AS n FROM awooop_llm_reservations GROUP BY 1, 2"
            )
        }
    for unit, spent in ((BudgetUnit.TOKENS, budget), (BudgetUnit.COST, cost)):
        state = states[unit]
        assert (state.used, state.reserved, state.calls) == (spent, 0, fit), unit
        # The killed attempts' reservations were released, not charged; every other settled.
        assert rows.get((unit.value, "settled")) == fit, rows
        assert rows.get((unit.value, "released"), 0) >= 1, rows
        assert (unit.value, "reserved") not in rows, rows
    retried = [s for s in results if s.attempt_count > 1]
    assert retried, "no run was retried after the kill"
