"""``run.llm_step`` in the handler kit: the model call and its step in one write, the answer
journaled and replayed without calling the model, its tries, and the agent contract's entry."""

from __future__ import annotations

from typing import Any

from awooop.core.errors import DatabaseUnavailableError, ModelUnavailableError
from awooop.core.events import ModelCalled, StepCompleted
from awooop.llm.gateway import LLMResult
from awooop.testing import FakeModel, HandlerKit
from awooop.worker.context import RunContext
from awooop.worker.policies import Retry

QUICK = Retry(max_attempts=2, initial_s=0.001, max_s=0.001)


async def two_steps(run: RunContext) -> list[str]:
    first = await run.llm_step("ask", "What is wrong?")
    second = await run.llm_step("fix", f"Fix: {first.text}")
    return [first.text, second.text]


async def test_each_answer_is_journaled_with_its_call_and_the_next_attempt_replays_it() -> None:
    async def flaky(run: RunContext) -> list[str]:
        answers = await two_steps(run)
        if run.attempt == 1:
            raise DatabaseUnavailableError("postgres restarted")
        return answers

    model = FakeModel("disk full", "grow the volume")
    result = await HandlerKit(flaky, model=model).run()
    assert result.value == ["disk full", "grow the volume"] and result.attempts == 2
    assert model.prompts == ["What is wrong?", "Fix: disk full"]  # attempt 2 called nothing
    types = result.journal.types
    first = types.index("ModelCalled")
    assert types[first : first + 4] == ["ModelCalled", "StepCompleted"] * 2
    steps = result.journal.of_type(StepCompleted)
    assert [s.step for s in steps] == ["ask", "fix"]
    assert LLMResult(**steps[0].result).text == "disk full"
    assert steps[0].result["model"] == "fake-model"


async def test_a_replay_returns_the_journaled_answers_and_calls_no_model() -> None:
    recorded = (await HandlerKit(two_steps, model=FakeModel("a", "b")).run()).journal
    report = await HandlerKit(two_steps, model=FakeModel(strict=True)).replay(recorded)
    assert report.result.value == ["a", "b"]
    assert report.replayed == ["ask", "fix"] and report.ran == [] and report.model_calls == []


async def test_a_failed_try_is_recorded_alone_and_the_answer_with_its_step() -> None:
    async def once(run: RunContext) -> str:
        return (await run.llm_step("ask", "hi", retry=QUICK)).text

    model = FakeModel(ModelUnavailableError("the model is away"), "hello")
    result = await HandlerKit(once, model=model).run()
    assert result.value == "hello"
    calls = result.journal.of_type(ModelCalled)
    assert [(c.outcome, c.try_number) for c in calls] == [("E-LLM-001", 1), ("ok", 2)]
    assert result.journal.types[-3:] == ["ModelCalled", "StepCompleted", "RunCompleted"]


async def test_the_last_failed_try_fails_the_run_with_nothing_journaled_for_the_step() -> None:
    async def once(run: RunContext) -> Any:
        return await run.llm_step("ask", "hi", retry=Retry(max_attempts=1))

    model = FakeModel(ModelUnavailableError("the model is away"))
    result = await HandlerKit(once, model=model).run()
    assert result.failure_code == "E-LLM-001"
    assert result.journal.of_type(StepCompleted) == []
    assert len(result.journal.of_type(ModelCalled)) == 1


async def test_the_agent_contracts_entry_for_the_step_sets_its_tries() -> None:
    async def once(run: RunContext) -> str:
        return (await run.llm_step("ask", "hi", retry=Retry(max_attempts=1))).text

    model = FakeModel(ModelUnavailableError("away"), ModelUnavailableError("away"), "at last")
    section = {"steps": {"ask": {"max_attempts": 3, "initial_s": 0.001, "max_s": 0.001}}}
    result = await HandlerKit(once, model=model, contract_retry=section).run()
    assert result.value == "at last"
    assert [c.try_number for c in result.journal.of_type(ModelCalled)] == [1, 2, 3]
