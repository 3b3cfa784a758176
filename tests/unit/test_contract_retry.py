"""A run contract's retry section over the code's step and tool policies
(awooop/worker/contract_retry.py): the merge, the checks of a section (awooop/revisions/
retry_section.py), one read per attempt, and the handler kit applying a section."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from awooop.core.errors import InvalidContractBodyError, ModelUnavailableError
from awooop.core.events import StepCompleted
from awooop.eventlog.state import RunStatus
from awooop.revisions.body import validate_body
from awooop.testing import HandlerKit
from awooop.worker.context import RunContext
from awooop.worker.contract_retry import ContractRetry, Overrides, merged
from awooop.worker.policies import RETRYABLE, STEP_DEFAULT, TOOL_DEFAULT, How, Retry


class Flaky(Exception):
    pass


def test_an_entry_replaces_the_fields_it_names_and_keeps_the_codes_others() -> None:
    code: How = {"retry": Retry(max_attempts=2, initial_s=1.0, on=(Flaky,)), "timeout": 5.0}
    assert merged(code, None, STEP_DEFAULT) == code
    assert merged(code, {}, STEP_DEFAULT) == code
    assert merged(code, {"max_attempts": 4}, STEP_DEFAULT) == {
        "retry": Retry(max_attempts=4, initial_s=1.0, on=(Flaky,)),
        "timeout": 5.0,
    }
    assert merged(code, {"on": ["E-TOOL-001"], "timeout_s": 0.5}, STEP_DEFAULT) == {
        "retry": Retry(max_attempts=2, initial_s=1.0, on=("E-TOOL-001",)),
        "timeout": 0.5,
    }


def test_without_a_policy_in_code_an_entry_applies_to_the_default() -> None:
    assert merged({}, {"max_attempts": 3}, STEP_DEFAULT) == {
        "retry": Retry(max_attempts=3, on=(RETRYABLE,)),
        "timeout": None,
    }
    assert merged({}, {"timeout_s": 2}, TOOL_DEFAULT) == {"retry": TOOL_DEFAULT, "timeout": 2}


def test_a_policy_in_code_that_is_not_a_retry_is_left_for_the_step_to_refuse() -> None:
    bad: Any = {"retry": 3}
    assert merged(bad, {"max_attempts": 2}, STEP_DEFAULT) is bad


@pytest.mark.parametrize(
    ("section", "path", "said"),
    [
        ([], "retry", "must be an object"),
        ({"max_attempts": 3}, "retry.max_attempts", "policy_routing contract's retry section"),
        ({"workflows": {}}, "retry.workflows", "unknown field"),
        ({"steps": []}, "retry.steps", "must map names to policies"),
        ({"steps": {"": {}}}, "retry.steps", "a name must not be empty"),
        ({"steps": {"fetch": 3}}, "retry.steps.fetch", "must be an object"),
        ({"steps": {"fetch": {"tries": 3}}}, "retry.steps.fetch.tries", "unknown field"),
        ({"steps": {"fetch": {"max_attempts": 0}}}, "retry.steps.fetch", "at least 1"),
        ({"tools": {"s": {"max_attempts": 1.5}}}, "retry.tools.s.max_attempts", "an integer"),
        ({"tools": {"s": {"timeout_s": 0}}}, "retry.tools.s.timeout_s", "a positive number"),
        ({"tools": {"s": {"timeout_s": True}}}, "retry.tools.s.timeout_s", "a positive number"),
        ({"tools": {"s": {"on": ["ValueError"]}}}, "retry.tools.s", "neither an error code"),
    ],
)
def test_a_malformed_agent_section_is_refused_naming_the_path(
    section: Any, path: str, said: str
) -> None:
    with pytest.raises(InvalidContractBodyError) as refused:
        validate_body("p", "agent", "default", {"max_attempts": 3, "retry": section})
    assert refused.value.details["path"] == path
    assert refused.value.message.startswith(f"agent: {path}: ")
    assert said in refused.value.message


def test_a_valid_agent_section_and_the_policy_sections_paths() -> None:
    entry = {"max_attempts": 4, "initial_s": 0.2, "on": ["retryable", "E-TOOL-001"]}
    section = {"steps": {"fetch": {**entry, "timeout_s": 10}}, "tools": {"search": {}}}
    validate_body("p", "agent", "default", {"max_attempts": 3, "retry": section})
    validate_body("p", "agent", "default", {"retry": None})
    assert Overrides.of(section).steps["fetch"]["timeout_s"] == 10
    with pytest.raises(InvalidContractBodyError) as refused:
        validate_body("p", "policy_routing", "default", {"retry": {"steps": {}}})
    assert refused.value.details["path"] == "retry.steps"  # a model call's has no steps


async def test_an_attempt_reads_its_section_once_for_parallel_calls() -> None:
    reads = 0

    async def read() -> Any:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        return {"tools": {"search": {"max_attempts": 5}}}

    overrides = ContractRetry(read)
    found = await asyncio.gather(*(overrides.tool("search", {}) for _ in range(3)))
    assert [how["retry"].max_attempts for how in found] == [5, 5, 5]
    assert (await overrides.step("other", {"timeout": 1.0})) == {"timeout": 1.0}
    assert reads == 1


async def test_a_section_that_is_no_longer_valid_is_ignored_with_a_warning() -> None:
    async def read() -> Any:
        return {"steps": {"fetch": {"max_attempts": "many"}}}

    with capture_logs() as logs:
        how = await ContractRetry(read).step("fetch", {})
    assert how == {}
    [warning] = [e for e in logs if e["event"] == "contract_retry_ignored"]
    assert "retry.steps.fetch.max_attempts" in warning["reason"]


def failing_once() -> Callable[[RunContext], Awaitable[str]]:
    """A handler whose step 'fetch' fails its first try with a retryable error."""
    tries = 0

    async def handle(run: RunContext) -> str:
        async def fetch() -> str:
            nonlocal tries
            tries += 1
            if tries == 1:
                raise ModelUnavailableError("busy")
            return "fetched"

        return await run.step("fetch", fetch)  # the code's policy: one try

    return handle


async def test_the_handler_kit_applies_a_contract_section_and_refuses_a_bad_one() -> None:
    section = {"steps": {"fetch": {"max_attempts": 2, "initial_s": 0, "max_s": 0}}}
    result = await HandlerKit(failing_once(), contract_retry=section).run({})
    assert (result.status, result.value) == (RunStatus.COMPLETED, "fetched")
    [step] = result.journal.of_type(StepCompleted)
    assert (step.tries, step.try_errors) == (2, ("E-LLM-001: busy",))

    failed = await HandlerKit(failing_once()).run({})  # without the section: the code's one try
    assert (failed.status, failed.failure_code) == (RunStatus.FAILED, "E-LLM-001")
    with pytest.raises(InvalidContractBodyError):
        HandlerKit(failing_once(), contract_retry={"steps": {"fetch": {"max_attempts": 0}}})
