"""The demo handler (awooop.examples.handlers:handle) on the real model gateway: the model call
goes through the revision pointer check, its answer is journaled with the revision that served
it, and an approval in the middle suspends and resumes the run without calling the model
again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.examples import handlers as example
from awooop.llm.gateway import ModelGateway
from awooop.revisions import writes as revisions
from awooop.runs import approvals
from awooop.runs.approvals import ApprovalTicket, Decision
from awooop.services import Services, redis_client
from awooop.streams.keys import Keys
from awooop.worker.runtime import Worker
from tests.support.runs import create_runs, event_types, load

P = "proj-demo"


@pytest.fixture
async def gateway(settings: Settings, db: Database) -> AsyncIterator[ModelGateway]:
    services = Services(
        settings=settings,
        db=db,
        redis=redis_client(settings.redis_url),
        keys=Keys(settings.redis_key_prefix, settings.shard_count),
    )
    gw = ModelGateway(services)
    await gw.start()
    yield gw
    await gw.close()
    await services.redis.aclose()


def llm_calls() -> float:
    return REGISTRY.get_sample_value("awooop_llm_calls_total", {"result": "ok"}) or 0.0


async def activate_policy(db: Database, body: dict[str, object]) -> str:
    async def once(conn: Connection) -> str:
        rev = await revisions.create_revision(conn, P, "policy_routing", "default", body)
        await revisions.activate_revision(conn, P, "policy_routing", "default", rev.revision_id)
        return str(rev.revision_id)

    return await db.in_tenant(P, once)


async def test_the_demo_handler_journals_the_model_answer_with_its_revision(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    revision_id = await activate_policy(db, {"model": "demo-model"})
    [run_id] = await create_runs(db, P, payload={"text": "disk full on db-1"})
    calls_before = llm_calls()
    worker = Worker(db=db, settings=settings, handler=example.handle, llm=gateway, concurrency=2)
    assert await worker.run_until_idle() == 1
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    summary = state.saga_steps["summarise"]["result"]
    assert summary["revision_id"] == revision_id and summary["model"] == "demo-model"
    assert summary["text"] and state.result["summary"] == summary["text"]
    assert state.result["acted"] is True and state.result["approved_by"] is None
    assert sorted(state.saga_steps) == ["act", "parse", "summarise"]
    assert llm_calls() == calls_before + 1


async def test_the_demo_handler_waits_for_approval_and_does_not_ask_the_model_twice(
    db: Database,
    settings: Settings,
    gateway: ModelGateway,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tickets = tmp_path / "approvals.jsonl"
    monkeypatch.setenv(example.APPROVALS_FILE_ENV, str(tickets))
    [run_id] = await create_runs(db, P, payload={"text": "restart api", "approval": True})
    worker = Worker(db=db, settings=settings, handler=example.handle, llm=gateway, concurrency=2)
    await worker.run_until_idle()
    assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"
    [line] = tickets.read_bytes().splitlines()
    ticket = msgspec.json.decode(line, type=ApprovalTicket)
    assert ticket.run_id == run_id and ticket.name == "act"
    await db.in_tenant(
        P, lambda c: approvals.decide(c, run_id, ticket.token, Decision.APPROVED, actor="oncall")
    )
    calls_before = llm_calls()
    await worker.run_until_idle()
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED" and state.result["approved_by"] == "oncall"
    assert llm_calls() == calls_before  # the journaled answer was replayed
    types = await event_types(db, P, run_id)
    assert types.count("StepCompleted") == 4  # parse, summarise, approval:act, act
    assert types.count("RunClaimed") == 2
