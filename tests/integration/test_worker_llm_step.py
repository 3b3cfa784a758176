"""``run.llm_step`` on a real worker, the real gateway (local model) and real Postgres: the
call and its step are one fenced write, so a crash before it re-calls the model, a journaled
answer is replayed without a call, and an attempt fenced out writes nothing; the agent
contract's entry for the step comes from the gateway's revision cache."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import DatabaseUnavailableError
from awooop.core.events import LeaseReleased, ModelCalled, StepCompleted, run_stream_id
from awooop.eventlog import eventlog
from awooop.llm import flow_store
from awooop.llm.admission import Admit
from awooop.llm.flow_rules import OnExceed
from awooop.llm.gateway import DEFAULT_CONTRACT, ModelCall, ModelGateway
from awooop.revisions.service import Revisions
from awooop.runs import leases
from awooop.worker.context import RunContext
from awooop.worker.policies import Retry
from awooop.worker.runtime import Worker
from tests.integration.test_model_calls import open_gateway
from tests.support.runs import create_runs, load

P = "proj-llm-step"


@pytest.fixture
async def gateway(settings: Settings, db: Database) -> AsyncIterator[ModelGateway]:
    gw, services = await open_gateway(settings, db)
    yield gw
    await gw.close()
    await services.redis.aclose()


async def stream(db: Database, run_id: uuid.UUID) -> list[Any]:
    async with db.tenant(P) as conn:
        return [e.decode() for e in await eventlog.read_stream(conn, run_stream_id(run_id))]


async def expire_and_reap(db: Database, run_id: uuid.UUID) -> None:
    """The attempt's lease runs out and the reaper requeues the run (its worker stalled or
    died)."""

    async def reap(conn: Connection) -> list[Any]:
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
            "WHERE run_id = $1",
            run_id,
        )
        return await leases.reap(conn, 10)

    assert len(await db.in_platform_writes(reap)) == 1


class FirstAnswer:
    """The gateway, counting its calls; the first answer is handled per ``then``: ``"crash"``
    (the run is requeued and the answer never comes back: the process died between the
    model's answer and its write) or ``"fenced"`` (the run is requeued, then the answer
    comes back to an attempt that no longer holds the lease)."""

    def __init__(self, gateway: ModelGateway, db: Database, run_id: uuid.UUID, then: str):
        self.gateway, self.db, self.run_id, self.then = gateway, db, run_id, then
        self.calls = 0

    async def call(
        self,
        project_id: str,
        prompt: str,
        *,
        contract: tuple[str, str] = DEFAULT_CONTRACT,
        options: Mapping[str, Any] | None = None,
        admit: Admit | None = None,
        **kw: Any,
    ) -> ModelCall:
        self.calls += 1
        call = await self.gateway.call(
            project_id, prompt, contract=contract, options=options, admit=admit, **kw
        )
        if self.calls == 1:
            assert call.error is None
            await expire_and_reap(self.db, self.run_id)
            if self.then == "crash":
                await asyncio.Event().wait()  # never returns: cancelled with the lost lease
        return call


async def one_step(run: RunContext) -> dict[str, Any]:
    answer = await run.llm_step("ask", "a b c", max_tokens=5)
    return {"text": answer.text, "attempt": run.attempt}


@pytest.mark.parametrize("then", ["crash", "fenced"])
async def test_an_answer_not_written_is_asked_again_and_a_fenced_attempt_writes_nothing(
    db: Database, settings: Settings, gateway: ModelGateway, then: str
) -> None:
    [run_id] = await create_runs(db, P, payload={})
    client = FirstAnswer(gateway, db, run_id, then)
    worker = Worker(db=db, settings=settings, handler=one_step, llm=client, concurrency=1)
    assert await worker.run_until_idle(max_s=120) == 2
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    assert state.result["attempt"] == 2 and client.calls == 2
    events = await stream(db, run_id)
    # Attempt 1 wrote neither its call nor its step; attempt 2 wrote both, one after the other.
    assert [e.attempt for e in events if isinstance(e, ModelCalled | StepCompleted)] == [2, 2]
    types = [type(e).__name__ for e in events]
    assert types[types.index("ModelCalled") + 1] == "StepCompleted"
    [step] = [e for e in events if isinstance(e, StepCompleted)]
    assert (step.step, step.result["text"]) == ("ask", state.result["text"])


async def test_a_journaled_answer_is_replayed_without_calling_the_model(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    client = FirstAnswer(gateway, db, uuid.uuid4(), "count only")
    client.calls = 1  # nothing stolen: only counted

    async def handle(run: RunContext) -> dict[str, Any]:
        done = await one_step(run)
        if run.attempt == 1:
            raise DatabaseUnavailableError("postgres restarted")  # handed back, uncharged
        return done

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=settings, handler=handle, llm=client, concurrency=1)
    assert await worker.run_until_idle(max_s=120) == 2
    state = await load(db, P, run_id)
    assert (state.status, state.result["attempt"]) == ("COMPLETED", 2), state.failure_reason
    assert client.calls == 2  # one call in all (the counter started at 1)
    events = await stream(db, run_id)
    assert [type(e).__name__ for e in events if isinstance(e, ModelCalled | StepCompleted)] == [
        "ModelCalled",
        "StepCompleted",
    ]
    assert any(isinstance(e, LeaseReleased) for e in events)


async def test_the_agent_contracts_entry_reaches_the_step_through_the_gateways_cache(
    db: Database, fast: Settings
) -> None:
    """The local model fails the first two calls of each prompt; the code allows one try, the
    active agent revision three. The section is served by the gateway (no read of its own),
    and each model call confirms the agent contract's pointer with its policy's."""
    revisions = Revisions(db)
    section = {"steps": {"ask": {"max_attempts": 3, "initial_s": 0.01, "max_s": 0.05}}}
    created = await revisions.create(P, "agent", "triage", {"retry": section})
    await revisions.activate(P, "agent", "triage", created.revision_id)
    gw, services = await open_gateway(
        msgspec.structs.replace(fast, llm_url="local:?fail_first=2"), db
    )

    async def handle(run: RunContext) -> str:
        return (await run.llm_step("ask", "x y", retry=Retry(max_attempts=1))).text

    try:
        [run_id] = await create_runs(db, P, payload={}, contract="triage")
        worker = Worker(db=db, settings=fast, handler=handle, llm=gw, concurrency=1)
        assert await worker.run_until_idle(max_s=60) == 1
        cached = gw.cache.get((P, "agent", "triage"))
        assert cached is not None and cached.revision_id == created.revision_id
    finally:
        await gw.close()
        await services.redis.aclose()
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    calls = [e for e in await stream(db, run_id) if isinstance(e, ModelCalled)]
    assert [(c.try_number, c.outcome) for c in calls] == [
        (1, "E-LLM-002"),
        (2, "E-LLM-002"),
        (3, "ok"),
    ]


async def test_under_a_budget_the_call_its_step_and_its_settlement_are_one_transaction(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    """With a token budget, the call's record goes through flow control's own write (its
    reservation settled with it): the step is written in that transaction too."""
    async with db.tenant(P) as conn:
        await flow_store.set_budget(
            conn, P, "", tokens=1000, period_s=86400, reserve_tokens=50,
            on_exceed=OnExceed.FAIL, actor="test",
        )  # fmt: skip

    async def handle(run: RunContext) -> list[str]:
        return [(await run.llm_step(n, "a b c", max_tokens=5)).text for n in ("one", "two")]

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=settings, handler=handle, llm=gateway, concurrency=1)
    assert await worker.run_until_idle(max_s=120) == 1
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    events = await stream(db, run_id)
    kinds = [type(e).__name__ for e in events if isinstance(e, ModelCalled | StepCompleted)]
    assert kinds == ["ModelCalled", "StepCompleted"] * 2
    async with db.tenant(P) as conn:
        [budget] = await flow_store.budgets(conn, P)
        positions = await conn.fetch(
            "SELECT event_type, xmin::text AS tx FROM awooop_events WHERE stream_id = $1 "
            "AND event_type IN ('ModelCalled', 'StepCompleted') ORDER BY position",
            run_stream_id(run_id),
        )
    assert (budget.calls, budget.reserved) == (2, 0) and budget.used > 0
    txs = [r["tx"] for r in positions]
    assert txs[0] == txs[1] and txs[2] == txs[3] and txs[0] != txs[2]  # one transaction each
