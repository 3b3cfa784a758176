"""awooop.testing.HandlerKit on a support-triage handler (parse, two model calls in steps, a
tool call, an approval, a side effect): every part of the kit, and that it keeps the
runtime's rules (journaling, replay, refusals, the failing step, the state machine)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from awooop.core.errors import (
    ApprovalExpiredError,
    ApprovalRejectedError,
    AwoooPError,
    DatabaseUnavailableError,
    DuplicateStepError,
    HandlerError,
    InvalidInputError,
    StepResultTypeError,
    UnstorableValueError,
)
from awooop.core.events import ApprovalRejected, LeaseReleased, StepCompleted, ToolResultReceived
from awooop.eventlog.state import RunStatus
from awooop.testing import Approve, Clock, FakeModel, FakeTools, HandlerKit, Reject
from awooop.worker.context import RunContext

SENT: list[str] = []  # the side effect: replies sent


class Ticket(msgspec.Struct):
    customer: str
    text: str


async def triage(run: RunContext) -> dict[str, Any]:
    async def parse() -> Ticket:
        return Ticket(customer=run.input["from"], text=run.input["text"].strip())

    ticket = await run.step("parse", parse, type=Ticket)

    async def classify() -> str:
        return (await run.llm(f"Classify: {ticket.text}")).text.strip().lower()

    category = await run.step("classify", classify)

    async def crm() -> dict[str, Any]:
        raise AssertionError("the real CRM is not called in tests")

    account = await run.wait_for_tool("crm", crm)

    async def draft() -> str:
        return (await run.llm(f"Draft a reply to {account['name']}: {ticket.text}")).text

    reply = await run.step("draft", draft)
    approver = None
    if category == "refund":
        grant = await run.wait_for_approval("refund", reason=f"refund {ticket.customer}")
        approver = grant.actor

    async def send() -> bool:
        SENT.append(reply)
        return True

    await run.step("send", send)
    return {"category": category, "reply": reply, "approver": approver}


def triage_kit(**kwargs: Any) -> HandlerKit:
    model = (
        FakeModel()
        .when("Classify", "Refund")
        .when(re.compile(r"^Draft a reply to (\w+)"), lambda p: f"Dear {p.split()[4][:-1]}")
    )
    tools = FakeTools({"crm": {"name": "Ada", "plan": "pro"}})
    return HandlerKit(triage, **{"model": model, "tools": tools, **kwargs})


INPUT = {"from": "ada@example.com", "text": " I want my money back "}


@pytest.fixture(autouse=True)
def _no_replies_sent() -> None:
    SENT.clear()


async def test_a_run_with_a_scripted_model_tool_and_approval() -> None:
    kit = triage_kit(approvals={"refund": Approve(actor="lead")})
    result = await kit.run(INPUT)
    assert result.value == {"category": "refund", "reply": "Dear Ada", "approver": "lead"}
    journal = result.journal
    assert journal.step_names == [
        "parse",
        "classify",
        "tool:crm",
        "draft",
        "approval:refund",
        "send",
    ]
    assert journal.steps["parse"] == {"customer": "ada@example.com", "text": "I want my money back"}
    assert journal.tools == {"crm": {"name": "Ada", "plan": "pro"}}
    assert [c.prompt for c in journal.model_calls] == [
        "Classify: I want my money back",
        "Draft a reply to Ada: I want my money back",
    ]
    assert [type(e).__name__ for e in journal.approvals] == ["ApprovalRequested", "ApprovalGranted"]
    assert SENT == ["Dear Ada"] and len(kit.model.calls) == 2  # nothing ran twice
    assert [c.tool for c in kit.tools.calls] == ["crm"]


async def test_the_test_approves_and_the_run_resumes_from_the_journal() -> None:
    kit = triage_kit()
    waiting = await kit.run(INPUT)
    assert waiting.status is RunStatus.WAITING_APPROVAL and SENT == []
    assert waiting.ticket is not None and waiting.ticket.reason == "refund ada@example.com"
    kit.approve("refund", actor="lead")
    result = await kit.resume()
    assert result.value["approver"] == "lead"
    assert SENT == ["Dear Ada"] and len(kit.model.calls) == 2 and len(kit.tools.calls) == 1


async def test_a_rejection_fails_the_run_with_its_reason() -> None:
    kit = triage_kit(approvals={"refund": Reject(actor="lead", reason="not eligible")})
    result = await kit.run(INPUT)
    assert result.status is RunStatus.FAILED
    assert result.failure_code == ApprovalRejectedError.code
    assert result.failure_reason == "Approval rejected by lead: not eligible"
    assert SENT == []


async def test_an_approval_expires_when_the_clock_passes_its_deadline() -> None:
    clock = Clock()
    kit = triage_kit(clock=clock, approval_ttl_s=3600)
    waiting = await kit.run(INPUT)
    assert waiting.ticket is not None
    assert waiting.ticket.expires_at == clock.now().replace(hour=1)
    kit.advance(3599)
    assert kit.state.status is RunStatus.WAITING_APPROVAL
    kit.advance(1)
    assert kit.state.status is RunStatus.FAILED
    assert kit.state.failure_code == ApprovalExpiredError.code
    with pytest.raises(ApprovalExpiredError):
        kit.approve("refund")


async def test_events_and_step_starts_are_on_the_kit_clock() -> None:
    clock = Clock()
    kit = triage_kit(clock=clock, approvals={"refund": Approve()})
    result = await kit.run(INPUT)
    assert {e.at for e in result.journal} == {clock.now()}
    assert {e.started_at for e in result.journal.of_type(StepCompleted) if e.started_at} == {
        clock.now()
    }


async def test_the_test_answers_a_tool_call_while_the_run_waits() -> None:
    kit = triage_kit(tools=FakeTools(), approvals={"refund": Approve()})
    running = asyncio.create_task(kit.run(INPUT))
    call = await kit.tools.next_call("crm")
    assert kit.state.status is RunStatus.WAITING_TOOL  # the real wait: the run holds no slot
    call.answer({"name": "Grace"})
    result = await running
    assert result.value["reply"] == "Dear Grace"
    [answer] = result.journal.of_type(ToolResultReceived)
    assert answer.result == {"name": "Grace"} and answer.others == 0


async def test_a_tool_that_does_not_answer_in_time_fails_its_step() -> None:
    kit = triage_kit(tools=FakeTools(timeout_s=0.05))
    result = await kit.run(INPUT)
    assert result.status is RunStatus.FAILED and result.failed_step == "tool:crm"
    assert result.failure_reason == "TimeoutError: tool 'crm': no answer within 0.05s"
    assert isinstance(result.error, TimeoutError)


async def test_a_scripted_tool_error_and_a_model_error_reach_the_handler() -> None:
    kit = triage_kit(tools=FakeTools({"crm": ConnectionResetError("crm down")}))
    result = await kit.run(INPUT)
    assert result.failed_step == "tool:crm" and result.failure_code == HandlerError.code
    model = FakeModel(RuntimeError("model overloaded"))
    failed = await triage_kit(model=model).run(INPUT)
    assert failed.failed_step == "classify"
    [call] = failed.journal.model_calls
    assert call.outcome == AwoooPError.code  # an error outside the catalog
    assert call.reason == "RuntimeError: model overloaded"


async def test_a_strict_model_refuses_an_unscripted_prompt() -> None:
    result = await triage_kit(model=FakeModel(strict=True)).run(INPUT)
    assert result.failed_step == "classify" and isinstance(result.error, LookupError)


async def test_the_runtime_refusals_hold_in_the_kit() -> None:
    async def twice(run: RunContext) -> None:
        await run.step("a", lambda: asyncio.sleep(0, "x"))
        await run.step("a", lambda: asyncio.sleep(0, "y"))

    result = await HandlerKit(twice).run()
    assert result.failure_code == DuplicateStepError.code

    async def nul(run: RunContext) -> None:
        await run.step("text", lambda: asyncio.sleep(0, "bad\x00value"))

    result = await HandlerKit(nul).run()
    assert result.failure_code == UnstorableValueError.code and result.failed_step == "text"
    assert result.journal.step_names == []


async def test_an_attempt_whose_stores_were_away_is_taken_again_without_rerunning_steps() -> None:
    ran: list[str] = []

    async def flaky(run: RunContext) -> int:
        async def once() -> int:
            ran.append("once")
            return 1

        value = await run.step("once", once)
        if run.attempt == 1:
            raise DatabaseUnavailableError("postgres restarted")
        return value

    result = await HandlerKit(flaky).run()
    assert result.value == 1 and ran == ["once"] and result.attempts == 2
    [released] = result.journal.of_type(LeaseReleased)
    assert released.charged is False


async def test_parallel_tool_calls_are_one_wait_of_the_run() -> None:
    async def both(run: RunContext) -> list[Any]:
        return list(
            await asyncio.gather(
                run.wait_for_tool("a", lambda: asyncio.sleep(0, 1)),
                run.wait_for_tool("b", lambda: asyncio.sleep(0, 2)),
            )
        )

    started: list[str] = []
    all_started = asyncio.Event()

    async def answer(value: str) -> str:  # each answers once both calls are out
        started.append(value)
        if len(started) == 2:
            all_started.set()
        await all_started.wait()
        return value

    tools = FakeTools({"a": lambda: answer("A"), "b": lambda: answer("B")})
    result = await HandlerKit(both, tools=tools).run()
    assert result.value == ["A", "B"]
    assert [e.others for e in result.journal.of_type(ToolResultReceived)] == [1, 0]
    assert result.journal.types.count("ToolWaitStarted") == 2


async def test_replay_reports_changed_steps_and_a_type_that_no_longer_fits() -> None:
    recorded = (await triage_kit(approvals={"refund": Approve()}).run(INPUT)).journal

    class TicketV2(msgspec.Struct):
        customer: str
        text: str
        priority: int  # a field without a default: recorded results do not fit

    async def triage_v2(run: RunContext) -> None:
        await run.step("parse", lambda: asyncio.sleep(0, None), type=TicketV2)

    report = await triage_kit().replay(recorded, triage_v2)
    assert report.result.failure_code == StepResultTypeError.code
    assert "the recorded result does not fit TicketV2" in (report.result.failure_reason or "")
    assert report.replayed == ["parse"] and report.ran == []
    assert report.unused == ["approval:refund", "classify", "draft", "send", "tool:crm"]

    same = await triage_kit().replay(recorded)  # the same code: everything replays
    assert same.ran == [] and same.model_calls == [] and SENT == ["Dear Ada"]
    assert same.result.value["approver"] == "test"


async def test_a_journal_that_waits_for_an_approval_is_not_replayed() -> None:
    waiting = (await triage_kit().run(INPUT)).journal
    with pytest.raises(InvalidInputError, match="waits for an approval"):
        await triage_kit().replay(waiting)


async def review(run: RunContext) -> dict[str, Any]:
    decision = await run.wait_for_approval(
        "send",
        reason="check the draft",
        payload={"body": "Dear Ada"},
        expires_in=timedelta(minutes=10),
        on_reject="return",
        on_expire="return",
    )
    return {
        "approved": decision.approved,
        "expired": decision.expired,
        "reason": decision.reason,
        "payload": decision.payload,
        "actor": decision.actor,
    }


async def test_the_reviewer_edits_the_draft_and_gives_a_reason() -> None:
    kit = HandlerKit(review)
    waiting = await kit.run()
    assert waiting.ticket is not None and waiting.ticket.payload == {"body": "Dear Ada"}
    assert waiting.ticket.expires_at == kit.clock.now() + timedelta(minutes=10)  # its own expiry
    kit.approve("send", actor="lead", reason="kinder", payload={"body": "Dear Ada, sorry"})
    result = await kit.resume()
    assert result.value == {
        "approved": True,
        "expired": False,
        "reason": "kinder",
        "payload": {"body": "Dear Ada, sorry"},
        "actor": "lead",
    }
    unchanged = HandlerKit(review, approvals={"send": Approve(payload={"body": "Dear Ada"})})
    assert (await unchanged.run()).value["payload"] is None  # the draft itself: no edit


async def test_a_request_that_returns_gets_its_rejection_and_its_expiry() -> None:
    kit = HandlerKit(review, approvals={"send": Reject(actor="lead", reason="too curt")})
    result = await kit.run()
    assert result.value["approved"] is False and result.value["reason"] == "too curt"
    assert result.journal.of_type(ApprovalRejected)[0].resumed is True
    kit = HandlerKit(review)
    await kit.run()
    kit.advance(600)
    assert kit.state.status is RunStatus.RESUMED
    result = await kit.resume()
    assert result.value["expired"] is True and result.value["actor"] is None
    with pytest.raises(ApprovalExpiredError):
        kit.approve("send")


async def test_run_steps_reads_the_results_of_this_attempts_steps_as_journaled() -> None:
    seen: dict[str, Any] = {}

    async def handler(run: RunContext) -> None:
        await run.step("a", lambda: _value({"x": [1, "two"]}))
        await run.llm_step("b", "a b c")
        seen.update(run.steps)

    result = await HandlerKit(handler, model=FakeModel("answer")).run({})
    assert seen["a"] == {"x": [1, "two"]} == result.journal.steps["a"]
    assert seen["b"]["text"] == "answer" and seen["b"] == result.journal.steps["b"]


async def _value(value: Any) -> Any:
    return value
