"""Retry policies and timeouts of steps, tool calls and model calls (awooop.worker.policies),
with a real worker on real Postgres: a model that fails twice then answers completes the run in
one attempt with three recorded tries; a tool that times out every time is tried per its policy,
then fails the run naming the tool; a step that raises is tried again only when its policy says
so, and a step completed after retries is replayed, not run again; a model call's policy
contract and a run's agent contract override the code's policies."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import ToolTimeoutError
from awooop.core.events import (
    LeaseReleased,
    ModelCalled,
    RunFailed,
    StepCompleted,
    ToolWaitStarted,
)
from awooop.llm.gateway import DEFAULT_CONTRACT, ModelGateway
from awooop.revisions.service import Revisions
from awooop.runs import control
from awooop.worker.context import RunContext
from awooop.worker.policies import Retry
from awooop.worker.runtime import Worker
from tests.integration.test_model_calls import open_gateway
from tests.support.runs import create_runs, events_of, load
from tests.support.waiting import eventually

P = "proj-retries"
QUICK = {"initial_s": 0.01, "max_s": 0.05}


class Flaky(Exception):
    pass


@pytest.fixture
async def failing_gateway(fast: Settings, db: Database) -> AsyncIterator[ModelGateway]:
    """The local model failing the first two calls of each prompt (503: E-LLM-002)."""
    gw, services = await open_gateway(
        msgspec.structs.replace(fast, llm_url="local:?fail_first=2"), db
    )
    yield gw
    await gw.close()
    await services.redis.aclose()


async def runs_show(settings: Settings, capsys: pytest.CaptureFixture[str], run: str) -> Any:
    args = build_parser().parse_args(["runs", "show", run, "--json"])
    assert await args.run(settings, args) == 0
    return msgspec.json.decode(capsys.readouterr().out)


@pytest.mark.connections(9)
async def test_a_model_failing_twice_then_answering_completes_in_one_attempt(
    db: Database,
    fast: Settings,
    failing_gateway: ModelGateway,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def handle(run: RunContext) -> str:
        async def ask() -> str:
            return (await run.llm(f"summarise {run.run_id}")).text  # the default policy

        return await run.step("summary", ask)

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=fast, handler=handle, llm=failing_gateway, concurrency=1)
    assert await worker.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    assert state.attempt_count == 1
    assert str(state.result).startswith("local:")

    events = await events_of(db, P, run_id)
    calls = [e for e in events if isinstance(e, ModelCalled)]
    assert [(c.attempt, c.try_number, c.outcome) for c in calls] == [
        (1, 1, "E-LLM-002"),
        (1, 2, "E-LLM-002"),
        (1, 3, "ok"),
    ]
    first, second = calls[0].next_try_in_s, calls[1].next_try_in_s
    assert first is not None and 0.45 <= first <= 0.55  # 0.5 s, +-10 %
    assert second is not None and 0.9 <= second <= 1.1  # doubled
    assert calls[2].next_try_in_s is None
    assert "503" in calls[0].reason
    # Each wait passed before the next try started.
    assert (calls[1].started_at - calls[0].started_at).total_seconds() >= first
    [step] = [e for e in events if isinstance(e, StepCompleted)]
    assert (step.step, step.tries) == ("summary", 1)  # the step ran once; the model, thrice

    shown = await runs_show(fast, capsys, str(run_id))
    listed = shown["model_calls"]
    assert [(c["try_number"], c["outcome"]) for c in listed] == [
        (1, "E-LLM-002"),
        (2, "E-LLM-002"),
        (3, "ok"),
    ]
    model_lines = [t for t in shown["timeline"] if t["event_type"] == "ModelCalled"]
    assert [t["detail"].get("try_number", 1) for t in model_lines] == [1, 2, 3]
    assert [("next_try_in_s" in t["detail"]) for t in model_lines] == [True, True, False]


async def test_a_model_answer_that_is_not_transient_is_not_retried(
    db: Database, fast: Settings
) -> None:
    gw, services = await open_gateway(
        msgspec.structs.replace(fast, llm_url="local:?fail_first=5&fail_status=400"), db
    )

    async def handle(run: RunContext) -> str:
        return (await run.llm("bad request", retry=Retry(max_attempts=5, **QUICK))).text

    try:
        [run_id] = await create_runs(db, P, payload={})
        worker = Worker(db=db, settings=fast, handler=handle, llm=gw, concurrency=1)
        assert await worker.run_until_idle(max_s=60) == 1
    finally:
        await gw.close()
        await services.redis.aclose()
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-LLM-002")
    calls = [e for e in await events_of(db, P, run_id) if isinstance(e, ModelCalled)]
    assert [(c.try_number, c.next_try_in_s) for c in calls] == [(1, None)]


async def test_a_tool_timing_out_every_time_fails_the_run_naming_the_tool(
    db: Database, fast: Settings
) -> None:
    calls = Counter[int]()

    async def handle(run: RunContext) -> str:
        async def search() -> str:
            calls[run.attempt] += 1
            await asyncio.sleep(30)  # never answers in time
            return "never"

        return await run.wait_for_tool(
            "search", search, retry=Retry(max_attempts=3, **QUICK), timeout=0.2
        )

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=fast, handler=handle, concurrency=1)
    assert await worker.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-TOOL-001")
    assert state.failure_reason is not None
    assert "tool 'search' did not finish within 0.2 s (try 3 of 3)" in state.failure_reason
    assert calls == {1: 3}  # three tries, in the one attempt
    events = await events_of(db, P, run_id)
    [failed] = [e for e in events if isinstance(e, RunFailed)]
    assert failed.step == "tool:search"
    assert "tool 'search': try 3 of 3, no try follows" in failed.traceback
    assert len([e for e in events if isinstance(e, ToolWaitStarted)]) == 1  # one wait
    assert not [e for e in events if isinstance(e, StepCompleted)]


async def test_a_step_raising_is_retried_only_when_its_policy_says_so_and_replayed_after(
    db: Database, fast: Settings
) -> None:
    calls = Counter[str]()

    async def handle(run: RunContext) -> int:
        async def flaky() -> int:
            calls["flaky"] += 1
            if calls["flaky"] < 3:
                raise Flaky(f"not yet ({calls['flaky']})")
            return 42

        async def plain() -> int:
            calls["plain"] += 1
            if run.attempt == 1:
                raise Flaky("a handler's own exception")
            return 1

        value = await run.step("flaky", flaky, retry=Retry(max_attempts=3, on=(Flaky,), **QUICK))
        return value + await run.step("plain", plain)  # default: no retry

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=fast, handler=handle, concurrency=1)
    assert await worker.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-HANDLER-001")
    assert calls == {"flaky": 3, "plain": 1}
    events = await events_of(db, P, run_id)
    [flaky] = [e for e in events if isinstance(e, StepCompleted)]
    assert (flaky.step, flaky.tries) == ("flaky", 3)
    assert flaky.try_errors == ("Flaky: not yet (1)", "Flaky: not yet (2)")
    [failed] = [e for e in events if isinstance(e, RunFailed)]
    assert failed.step == "plain"

    # The operator retries: the completed step is replayed (not run again), the other runs.
    await db.in_tenant(P, lambda c: control.retry(c, run_id, actor="test", extra_attempts=1))
    assert await worker.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", 43)
    assert calls == {"flaky": 3, "plain": 2}


async def test_a_step_timeout_and_a_malformed_policy(db: Database, fast: Settings) -> None:
    async def handle(run: RunContext) -> str:
        async def slow() -> str:
            await asyncio.sleep(30)
            return "late"

        if run.input.get("bad"):
            await run.step("bad", slow, retry=Retry(max_attempts=0))
        return await run.step("slow", slow, timeout=0.1)

    [timed_out] = await create_runs(db, P, payload={})
    [malformed] = await create_runs(db, P, payload={"bad": True})
    worker = Worker(db=db, settings=fast, handler=handle, concurrency=2)
    assert await worker.run_until_idle(max_s=60) == 2
    slow = await load(db, P, timed_out)
    assert (slow.status, slow.failure_code) == ("FAILED", "E-HANDLER-005")
    assert "step 'slow' did not finish within 0.1 s (try 1 of 1)" in (slow.failure_reason or "")
    bad = await load(db, P, malformed)
    assert (bad.status, bad.failure_code) == ("FAILED", "E-INPUT-001")
    assert "max_attempts must be at least 1" in (bad.failure_reason or "")
    assert not [e for e in await events_of(db, P, malformed) if isinstance(e, StepCompleted)]


async def test_a_shutdown_during_a_backoff_hands_the_run_back_and_the_step_starts_over(
    db: Database, fast: Settings
) -> None:
    tried = Counter[int]()
    settings = msgspec.structs.replace(fast, shutdown_grace_s=0.1)

    async def handle(run: RunContext) -> str:
        async def flaky() -> str:
            tried[run.attempt] += 1
            if run.attempt == 1:
                raise Flaky("the first attempt's try fails")
            return "done"

        # Attempt 1 waits 60 s after its failed try: the shutdown comes meanwhile.
        policy = Retry(max_attempts=2, initial_s=60.0, max_s=60.0, on=(Flaky,))
        return await run.step("flaky", flaky, retry=policy)

    [run_id] = await create_runs(db, P, payload={})
    stop = asyncio.Event()
    first = Worker(db=db, settings=settings, handler=handle, concurrency=1)
    serving = asyncio.create_task(first.run(stop))
    try:
        await eventually(lambda: tried[1] == 1, what="attempt 1's first try failed")
        started = asyncio.get_running_loop().time()
        stop.set()
        await asyncio.wait_for(serving, timeout=30)
        assert asyncio.get_running_loop().time() - started < 30  # the backoff was cut short
    finally:
        stop.set()
        if not serving.done():
            serving.cancel()
    state = await load(db, P, run_id)
    assert state.status == "PENDING" and state.attempt_count == 1
    [released] = [e for e in await events_of(db, P, run_id) if isinstance(e, LeaseReleased)]
    assert not released.charged  # a shutdown is not the run's fault

    second = Worker(db=db, settings=fast, handler=handle, concurrency=1)
    assert await second.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result, state.attempt_count) == ("COMPLETED", "done", 2)
    assert tried == {1: 1, 2: 1}  # attempt 2 started the step over, and it answered at once
    [step] = [e for e in await events_of(db, P, run_id) if isinstance(e, StepCompleted)]
    assert (step.attempt, step.tries, step.try_errors) == (2, 1, ())


async def test_a_policy_contracts_retry_section_overrides_the_codes_policy(
    db: Database, fast: Settings
) -> None:
    revisions = Revisions(db)
    body = {"model": "m", "retry": {"max_attempts": 4, "initial_s": 0.01, "max_s": 0.05}}
    created = await revisions.create(P, *DEFAULT_CONTRACT, body)
    await revisions.activate(P, *DEFAULT_CONTRACT, created.revision_id)
    gw, services = await open_gateway(
        msgspec.structs.replace(fast, llm_url="local:?fail_first=3"), db
    )

    async def handle(run: RunContext) -> str:
        # The code asks for 2 tries; the contract's section says 4 (and a shorter backoff).
        return (await run.llm(f"retry {run.run_id}", retry=Retry(max_attempts=2))).text

    try:
        [run_id] = await create_runs(db, P, payload={})
        worker = Worker(db=db, settings=fast, handler=handle, llm=gw, concurrency=1)
        assert await worker.run_until_idle(max_s=60) == 1
    finally:
        await gw.close()
        await services.redis.aclose()
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    calls = [e for e in await events_of(db, P, run_id) if isinstance(e, ModelCalled)]
    assert [(c.try_number, c.outcome) for c in calls] == [
        (1, "E-LLM-002"),
        (2, "E-LLM-002"),
        (3, "E-LLM-002"),
        (4, "ok"),
    ]
    assert all(c.revision_id == created.revision_id for c in calls)
    assert all(c.next_try_in_s is not None and c.next_try_in_s <= 0.055 for c in calls[:3])


async def test_the_run_contracts_retry_section_overrides_a_steps_and_a_tools_policy(
    db: Database, fast: Settings
) -> None:
    """The code tries step 'slow' once without a timeout and tool 'search' once; the active
    revision of the run's agent contract gives the step a timeout and a second try, and the
    tool three tries. A run of another contract (none active) keeps the code's policies."""
    revisions = Revisions(db)
    section = {
        "steps": {"slow": {"max_attempts": 2, "timeout_s": 0.5, **QUICK}},
        "tools": {"search": {"max_attempts": 3, **QUICK}},
    }
    created = await revisions.create(P, "agent", "triage", {"retry": section})
    await revisions.activate(P, "agent", "triage", created.revision_id)
    tries = Counter[tuple[str, str]]()

    async def handle(run: RunContext) -> str:
        async def slow() -> str:
            tries[str(run.run_id), "slow"] += 1
            if tries[str(run.run_id), "slow"] == 1 and run.input.get("hang"):
                await asyncio.sleep(30)  # the first try hangs
            return "slow"

        async def search() -> str:
            tries[str(run.run_id), "search"] += 1
            if tries[str(run.run_id), "search"] == 1:
                raise ToolTimeoutError("the search backend did not answer")
            return "found"

        done = await run.step("slow", slow)
        return done + " " + await run.wait_for_tool("search", search, retry=Retry(max_attempts=1))

    [overridden] = await create_runs(db, P, payload={"hang": True}, contract="triage")
    [other] = await create_runs(db, P, payload={})  # contract default: nothing active
    worker = Worker(db=db, settings=fast, handler=handle, concurrency=2)
    assert await worker.run_until_idle(max_s=60) == 2

    state = await load(db, P, overridden)
    assert (state.status, state.result, state.attempt_count) == ("COMPLETED", "slow found", 1)
    steps = {e.step: e for e in await events_of(db, P, overridden) if isinstance(e, StepCompleted)}
    assert steps["slow"].tries == 2
    assert steps["slow"].try_errors == (
        "E-HANDLER-005: step 'slow' did not finish within 0.5 s (try 1 of 2)",
    )
    assert steps["tool:search"].tries == 2
    assert steps["tool:search"].try_errors == ("E-TOOL-001: the search backend did not answer",)

    state = await load(db, P, other)
    assert (state.status, state.failure_code) == ("FAILED", "E-TOOL-001")
    assert tries[str(other), "search"] == 1
