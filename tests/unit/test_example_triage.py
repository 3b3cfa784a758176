"""The example triage agent (awooop/examples/triage.py) in the in-memory test kit: its lookup
child runs, and the conversation before the fan-out (an edited question, a reply, a declined
question), and the whole agent, its lookups run as child runs of the kit."""

from __future__ import annotations

from awooop.eventlog.state import RunStatus
from awooop.examples import triage
from awooop.testing import FakeTools, HandlerKit

TICKET = {"ticket": "T-7", "customer": "ada@example.com", "text": "the dashboard is blank"}


async def test_a_lookup_run_is_one_tool_call() -> None:
    kit = HandlerKit(triage.handle, tools=FakeTools({"account": {"plan": "free"}}))
    result = await kit.run({"lookup": "account", "customer": "ada"}, contract_id=triage.LOOKUP)
    assert result.value == {"plan": "free"}
    assert result.journal.step_names == ["tool:account"]
    # the stand-in tools answer when the test does not
    passthrough = HandlerKit(triage.handle, tools=FakeTools(passthrough=True))
    result = await passthrough.run({"lookup": "runbook"}, contract_id=triage.LOOKUP)
    assert result.value["title"] == "blank dashboard"
    result = await passthrough.run({"lookup": "weather"}, contract_id=triage.LOOKUP)
    assert result.status == RunStatus.FAILED and "no lookup named 'weather'" in str(
        result.failure_reason
    )


async def test_the_edited_question_is_sent_and_the_reply_taken_before_the_fan_out() -> None:
    kit = HandlerKit(triage.handle, tools=FakeTools(passthrough=True))
    result = await kit.run(TICKET)
    assert result.status == RunStatus.WAITING_APPROVAL
    assert result.ticket is not None and result.ticket.payload == {
        "question": "About T-7: when did it start, and what do you see?"
    }
    kit.approve("ask_customer", by="lead", payload={"question": "Since when?"})
    result = await kit.resume()
    assert result.status == "WAITING_EVENT" and result.journal.state.waiting_for == "event reply"
    assert result.journal.steps["ask"] == {"to": "ada@example.com", "question": "Since when?"}
    assert kit.signal("reply", {"text": "since 9:00"}).delivered
    result = await kit.resume()
    # the three lookups ran as child runs of the kit; the flaky status page's first try failed
    assert result.status == "WAITING_EVENT" and result.waiting_for == "sleep"
    assert result.journal.step_names == [
        "parse", "approval:ask_customer", "ask", "child:account", "child:incidents",
        "child:runbook", "children:1", "status:1",
    ]  # fmt: skip
    reply = result.journal.state.saga_steps["event:reply:1"]
    assert reply["ended"] == "signal" and reply["result"] == {"text": "since 9:00"}
    kit.advance(2)
    result = await kit.resume()
    assert result.value["lookups"]["account"]["plan"] == "business"
    assert result.value["status"]["tries"] == 2 and result.value["conversation"]["outcome"] == (
        "replied"
    )
    assert result.output.text == result.value["summary"]
    assert sorted(kit.children) == sorted(triage.LOOKUPS)
    assert {c.state.contract_id for c in kit.children.values()} == {triage.LOOKUP}


async def test_a_declined_question_is_not_sent_and_nothing_waits_for_a_reply() -> None:
    kit = HandlerKit(triage.handle, tools=FakeTools(passthrough=True))
    await kit.run(TICKET)
    kit.reject("ask_customer", actor="lead", reason="we know the cause")
    result = await kit.resume()
    assert result.journal.step_names[:3] == ["parse", "approval:ask_customer", "child:account"]
    assert "ask" not in result.journal.steps
    assert [w.kind for w in result.journal.waits] == ["sleep"]  # the status page's, no reply
