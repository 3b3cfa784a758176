"""Changing a handler with journaled runs in flight (docs/workers.md, Changing a handler
safely), shown with the test kit's replay of a recorded run against new code: the journal is
keyed by step name, so an added step runs, a removed step's journal entry is ignored, and a
renamed step runs again (sending a draft nobody approved) unless the journaled name is kept.
Each attempt's claim records the version of the code that ran it."""

from __future__ import annotations

from awooop.core.events import RunClaimed
from awooop.testing import FakeModel, HandlerKit, Journal
from awooop.worker.context import RunContext

SENT: list[str] = []  # the side effect: what was mailed to the customer
LOOKUPS: list[str] = []  # the CRM lookups made
MAIL_DOWN: list[bool] = [False]  # the mail server refuses while True


async def lookup(run: RunContext) -> str:
    async def call() -> str:
        LOOKUPS.append(run.input["to"])
        return "Ada"

    return await run.step("lookup", call)


async def write(run: RunContext, name: str) -> str:
    return (await run.llm(f"Draft a reply to {name}")).text


async def approve_and_send(run: RunContext, draft: str) -> str:
    await run.wait_for_approval("send", reason="send this draft", payload=draft)

    async def send() -> bool:
        if MAIL_DOWN[0]:
            raise ConnectionError("mail server down")
        SENT.append(draft)
        return True

    await run.step("send", send)
    return draft


async def handle_v1(run: RunContext) -> str:
    name = await lookup(run)
    draft = await run.step("draft", lambda: write(run, name))
    return await approve_and_send(run, draft)


handle_v1.__awooop_version__ = "v1"  # type: ignore[attr-defined]  # declared on the function


async def in_flight() -> Journal:
    """A run of v1 that journaled its lookup and its draft ("draft one"), was approved
    (journaled as the step ``approval:send``) and failed to send (the mail server was down):
    it is retried on new code, as an operator's retry (or a crash) hands it to any worker."""
    SENT.clear()
    LOOKUPS.clear()
    kit = HandlerKit(handle_v1, model=FakeModel("draft one"))
    waiting = await kit.run({"to": "ada@example.com"})
    assert waiting.status == "WAITING_APPROVAL" and waiting.ticket is not None
    assert waiting.ticket.payload == "draft one" and SENT == []
    kit.approve("send", actor="lead")
    MAIL_DOWN[0] = True
    try:
        failed = await kit.resume()
    finally:
        MAIL_DOWN[0] = False
    assert (failed.status, failed.failed_step) == ("FAILED", "send")
    assert failed.journal.step_names == ["lookup", "draft", "approval:send"]
    return Journal.from_json(kit.journal.to_json())  # as a test would keep it


def versions_of(journal: Journal) -> list[str | None]:
    return [e.handler_version for e in journal.of_type(RunClaimed)]


async def test_an_added_step_runs_and_the_journaled_ones_replay() -> None:
    journal = await in_flight()

    async def handle_v2(run: RunContext) -> str:
        name = await lookup(run)
        draft = await run.step("draft", lambda: write(run, name))
        await run.step("audit", lambda: _noted(f"audited {draft}"))  # new in v2
        return await approve_and_send(run, draft)

    handle_v2.__awooop_version__ = "v2"  # type: ignore[attr-defined]
    report = await HandlerKit(handle_v2, model=FakeModel("draft two")).replay(journal)
    assert report.result.value == "draft one"
    assert report.replayed == ["lookup", "draft", "approval:send"]
    assert report.ran == ["audit", "send"]
    assert report.unused == [] and report.model_calls == []
    assert SENT == ["draft one"] and LOOKUPS == ["ada@example.com"]  # nothing repeated
    assert versions_of(report.result.journal) == ["v1", "v1", "v2"]  # what ran each attempt


async def test_a_removed_steps_journal_entry_is_ignored() -> None:
    journal = await in_flight()

    async def handle_v2(run: RunContext) -> str:  # v2 no longer looks the customer up
        draft = await run.step("draft", lambda: write(run, "customer"))
        return await approve_and_send(run, draft)

    report = await HandlerKit(handle_v2, model=FakeModel("draft two")).replay(journal)
    assert report.result.value == "draft one"
    assert report.replayed == ["draft", "approval:send"] and report.unused == ["lookup"]
    assert SENT == ["draft one"] and LOOKUPS == ["ada@example.com"]


async def test_a_renamed_step_runs_again_unless_the_journaled_name_is_kept() -> None:
    journal = await in_flight()

    async def renamed(run: RunContext) -> str:  # "draft" became "compose"
        name = await lookup(run)
        draft = await run.step("compose", lambda: write(run, name))
        return await approve_and_send(run, draft)

    report = await HandlerKit(renamed, model=FakeModel("draft two")).replay(journal)
    assert report.ran == ["compose", "send"] and report.unused == ["draft"]
    assert [c.answer for c in report.model_calls] == ["draft two"]  # the model asked again
    assert SENT == ["draft two"]  # not the draft that was approved: the bug to avoid

    journal = await in_flight()

    async def kept(run: RunContext) -> str:  # the function is new, the step's name is not
        name = await lookup(run)
        draft = await run.step("draft", lambda: compose(run, name))
        return await approve_and_send(run, draft)

    report = await HandlerKit(kept, model=FakeModel("draft two")).replay(journal)
    assert report.replayed == ["lookup", "draft", "approval:send"] and report.unused == []
    assert report.model_calls == [] and SENT == ["draft one"]  # what was approved


async def compose(run: RunContext, name: str) -> str:
    return (await run.llm(f"Compose a reply to {name}")).text


async def _noted(text: str) -> str:
    return text
