"""awooop.testing.pytest_plugin: the ``awooop_postgres`` fixture runs a handler with a real
worker on a real database through the polling path (no Redis), and the in-memory kit writes
the same events as that worker, so a journal recorded on Postgres replays in the kit."""

from __future__ import annotations

from awooop.eventlog.state import RunStatus
from awooop.examples import handlers as example
from awooop.testing import FakeModel, HandlerKit
from awooop.testing.postgres import PostgresKit
from awooop.worker.context import RunContext

pytest_plugins = ["awooop.testing.pytest_plugin"]  # as a project's root conftest.py loads it


async def test_the_demo_handler_on_postgres_writes_what_the_kit_writes(
    awooop_postgres: PostgresKit,
) -> None:
    pg = awooop_postgres
    pg.model = FakeModel("grow the volume")
    run_id = await pg.create({"text": "disk full", "approval": True})
    assert await pg.work(example.handle) == 1
    assert (await pg.state(run_id)).status == RunStatus.WAITING_APPROVAL
    await pg.approve(run_id, by="oncall")
    await pg.work(example.handle)
    state = await pg.state(run_id)
    assert state.status == RunStatus.COMPLETED, state.failure_reason
    assert state.result == {"summary": "grow the volume", "approved_by": "oncall", "acted": True}
    recorded = await pg.journal(run_id)

    kit = HandlerKit(example.handle, model=FakeModel("grow the volume"))
    await kit.run({"text": "disk full", "approval": True})
    kit.approve("act", actor="kit", by="oncall")
    in_memory = (await kit.resume()).journal
    assert in_memory.types == recorded.types
    assert in_memory.step_names == recorded.step_names
    assert in_memory.steps == recorded.steps

    report = await HandlerKit(example.handle, model=FakeModel(strict=True)).replay(recorded)
    assert report.ran == [] and report.model_calls == []
    assert report.replayed == ["parse", "summarise", "approval:act", "act"]
    assert report.result.value == state.result


async def test_a_reviewed_approval_on_postgres_and_in_the_kit(
    awooop_postgres: PostgresKit,
) -> None:
    from tests.unit.test_handler_kit import review

    pg = awooop_postgres
    run_id = await pg.create()
    await pg.work(review)
    await pg.reject(run_id, by="lead", reason="too curt", payload={"body": "Hi"})
    await pg.work(review)
    state = await pg.state(run_id)
    recorded = await pg.journal(run_id)

    kit = HandlerKit(review)
    await kit.run()
    kit.reject("send", actor="kit", by="lead", reason="too curt", payload={"body": "Hi"})
    result = await kit.resume()
    assert result.journal.types == recorded.types
    assert result.value == state.result
    assert state.result["approved"] is False and state.result["payload"] == {"body": "Hi"}


async def streaming_review(run: RunContext) -> str:
    await run.emit_output(f"draft {run.attempt}: ")
    await run.emit_output("ünïcode ✓")
    await run.wait_for_approval("send")  # flushed first: the request ends the lease
    await run.emit_output(" sent")
    return "ok"


async def test_output_on_postgres_is_what_the_kit_shows(awooop_postgres: PostgresKit) -> None:
    pg = awooop_postgres
    run_id = await pg.create()
    await pg.work(streaming_review)
    assert (await pg.output(run_id)).text == "draft 1: ünïcode ✓"  # flushed before the wait
    await pg.approve(run_id, by="lead")
    await pg.work(streaming_review)
    stored = await pg.output(run_id)

    kit = HandlerKit(streaming_review)
    await kit.run()
    kit.approve("send", actor="kit", by="lead")
    result = await kit.resume()
    assert result.output.text == stored.text == "draft 1: ünïcode ✓draft 2: ünïcode ✓ sent"
    for attempt in (1, 2):
        assert result.output.of_attempt(attempt) == stored.of_attempt(attempt)
    assert not stored.truncated


async def test_sleeps_and_signals_on_postgres_write_what_the_kit_writes(
    awooop_postgres: PostgresKit,
) -> None:
    """A sleep fired by the timers loop once its due time is moved past, a signal sent before
    the event wait (kept, taken at once), another answering a second wait: the journal on
    Postgres has the kit's events and replays in the kit without waiting."""
    from datetime import timedelta

    from tests.unit.test_handler_kit_waits import DONE, remind_later

    async def twice(run: RunContext) -> object:
        first = await remind_later(run)
        second = await run.wait_for_event("paid", step="again")
        return {"first": first, "second": second}

    pg = awooop_postgres
    run_id = await pg.create()
    await pg.work(twice)
    assert (await pg.state(run_id)).waiting_for == "sleep"
    kept = await pg.signal(run_id, "paid", {"order": "o-7", "amount": 4}, key="k1")
    assert not kept.delivered
    assert await pg.fire_timers() == 0  # an hour to go
    assert await pg.advance(timedelta(hours=1)) == 1
    await pg.work(twice)
    assert (await pg.state(run_id)).waiting_for == "event paid"
    assert (await pg.signal(run_id, "paid", {"n": 2}, key="k2")).delivered
    assert (await pg.signal(run_id, "paid", {"n": 3}, key="k2")).duplicate
    await pg.work(twice)
    state = await pg.state(run_id)
    assert state.status == RunStatus.COMPLETED, state.failure_reason
    assert state.result == {"first": {"order": "o-7", "paid": 4}, "second": {"n": 2}}
    recorded = await pg.journal(run_id)

    DONE.clear()
    kit = HandlerKit(twice)
    await kit.run()
    kit.signal("paid", {"order": "o-7", "amount": 4}, key="k1")
    kit.advance(timedelta(hours=1))
    await kit.resume()
    kit.signal("paid", {"n": 2}, key="k2")
    in_memory = (await kit.resume()).journal
    assert in_memory.types == recorded.types
    assert in_memory.step_names == recorded.step_names
    assert [e.step for e in in_memory.waits] == [e.step for e in recorded.waits]
    assert in_memory.state.result == state.result

    report = await HandlerKit(twice).replay(recorded)
    assert report.ran == [] and report.result.value == state.result
    assert report.replayed == ["place", "sleep:1", "event:paid:1", "event:again"]
