"""The demo handler (awooop.examples.handlers:handle) under the handler kit: no servers. The
same behaviour tests/integration/test_worker_example.py checks on Postgres and the model
gateway: the model answer is journaled, an approval suspends the run and resumes it without
asking the model again; and a recorded journal replayed against changed code."""

from __future__ import annotations

from typing import Any

from awooop.core.events import RunClaimed, StepCompleted
from awooop.eventlog.state import RunStatus
from awooop.examples import handlers as example
from awooop.testing import Approve, FakeModel, HandlerKit, Journal
from awooop.worker.context import RunContext


async def test_the_demo_handler_journals_the_model_answer() -> None:
    model = FakeModel().when("disk full", "db-1 is out of disk: grow the volume")
    kit = HandlerKit(example.handle, model=model)
    result = await kit.run({"text": "disk full on db-1"})
    assert result.status is RunStatus.COMPLETED
    assert result.value == {
        "summary": "db-1 is out of disk: grow the volume",
        "approved_by": None,
        "acted": True,
    }
    assert result.journal.step_names == ["parse", "summarise", "act"]
    assert result.journal.steps["summarise"]["model"] == "fake-model"
    assert model.prompts == ["Summarise for an on-call engineer:\ndisk full on db-1"]
    [call] = result.journal.model_calls
    assert call.outcome == "ok" and call.answer == "db-1 is out of disk: grow the volume"


async def test_the_demo_handler_waits_for_approval_and_does_not_ask_the_model_twice() -> None:
    model = FakeModel("restart it")
    kit = HandlerKit(example.handle, model=model)
    waiting = await kit.run({"text": "restart api", "approval": True})
    assert waiting.status is RunStatus.WAITING_APPROVAL
    assert waiting.ticket is not None and waiting.ticket.name == "act"
    assert waiting.ticket.reason == "act on: restart api"
    kit.approve("act", actor="oncall")
    result = await kit.resume()
    assert result.status is RunStatus.COMPLETED and result.value["approved_by"] == "oncall"
    assert len(model.calls) == 1  # the journaled answer was replayed
    assert len(result.journal.of_type(StepCompleted)) == 4  # parse, summarise, approval:act, act
    assert len(result.journal.of_type(RunClaimed)) == 2
    assert result.journal.step_names[2] == "approval:act"


async def test_a_scripted_approval_runs_through() -> None:
    kit = HandlerKit(example.handle, approvals={"act": Approve(actor="tok", by="ada")})
    result = await kit.run({"text": "restart api", "approval": True})
    assert result.value["approved_by"] == "ada"  # the person, else who held the token
    assert result.attempts == 2


async def handle_v2(run: RunContext) -> dict[str, Any]:
    """The demo handler in a later release: its model step renamed (a new prompt), its "act"
    step unchanged, "parse" removed (the text is read straight from the input)."""
    text = str(run.input["text"])

    async def ask() -> dict[str, Any]:
        answer = await run.llm(f"Summarise in one line:\n{text}")
        return {"text": answer.text}

    answer = await run.step("summarise:v2", ask)

    async def act() -> dict[str, Any]:
        return {"acted": "again"}

    acted = await run.step("act", act)
    return {"summary": answer["text"], **acted}


async def test_a_recorded_journal_replays_against_new_code() -> None:
    recorded = (await HandlerKit(example.handle, model=FakeModel("v1")).run({"text": "x"})).journal
    stored = Journal.from_json(recorded.to_json())  # kept as a file next to a test, say
    assert stored.types == recorded.types
    model = FakeModel("v2")
    report = await HandlerKit(handle_v2, model=model).replay(stored)
    assert report.replayed == ["act"]  # journaled: not run again, its recorded result back
    assert report.ran == ["summarise:v2"]  # renamed: a new step, run (and the model asked)
    assert report.unused == ["parse", "summarise"]  # removed or renamed: nothing runs for them
    assert [c.answer for c in report.model_calls] == ["v2"]
    assert model.prompts == ["Summarise in one line:\nx"]
    assert report.result.value == {"summary": "v2", "acted": True}
    assert report.result.attempts == 2  # the run was taken again, as by a new worker
