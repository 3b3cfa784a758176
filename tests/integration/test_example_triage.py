"""The example triage agent (awooop/examples/triage.py) run by a real worker on a real database
(the ``awooop_postgres`` fixture, which can start its child runs): a ticket the customer
answers and one that times out, each through the approval, the three lookups, the durable
sleep before the status page's retry and the streamed summary; the recorded journal replays
in the in-memory kit."""

from __future__ import annotations

from datetime import timedelta

from awooop.eventlog.state import RunStatus
from awooop.examples import triage
from awooop.testing import FakeModel, HandlerKit
from awooop.testing.postgres import PostgresKit

pytest_plugins = ["awooop.testing.pytest_plugin"]

TICKET = {"ticket": "T-7", "customer": "ada@example.com", "text": "the dashboard is blank"}


async def children_of(pg: PostgresKit, run_id: object) -> list[tuple[str, str, str]]:
    async with pg.db.platform() as conn:
        rows = await conn.fetch(
            "SELECT contract_id, status, input->>'lookup' AS lookup FROM awooop_run_state "
            "WHERE parent_run_id = $1 ORDER BY 3",
            run_id,
        )
    return [(r["contract_id"], r["status"], r["lookup"]) for r in rows]


async def test_a_ticket_the_customer_answers(awooop_postgres: PostgresKit) -> None:
    pg = awooop_postgres
    pg.model = FakeModel("check the CDN")
    run_id = await pg.create({**TICKET, "reply_timeout_s": 3600})
    await pg.work(triage.handle)
    assert (await pg.state(run_id)).status == RunStatus.WAITING_APPROVAL
    await pg.approve(run_id, by="lead")
    await pg.work(triage.handle)
    assert (await pg.state(run_id)).waiting_for == "event reply"
    assert (await pg.signal(run_id, "reply", {"text": "since 9:00"}, key="r1")).delivered
    await pg.work(triage.handle)  # the lookups run, then the first status try fails
    assert (await pg.state(run_id)).waiting_for == "sleep"
    assert await children_of(pg, run_id) == [
        ("lookup", "COMPLETED", "account"),
        ("lookup", "COMPLETED", "incidents"),
        ("lookup", "COMPLETED", "runbook"),
    ]
    assert await pg.advance(timedelta(seconds=2)) == 1
    await pg.work(triage.handle)
    state = await pg.state(run_id)
    assert state.status == RunStatus.COMPLETED, state.failure_reason
    result = state.result
    assert result["conversation"] == {
        "asked": "About T-7: when did it start, and what do you see?",
        "reply": "since 9:00",
        "outcome": "replied",
    }
    assert result["lookups"]["account"]["plan"] == "business"
    assert result["status"] == {"ok": True, "status": "all systems operational", "tries": 2}
    assert result["summary"].endswith("model: check the CDN\n")
    output = await pg.output(run_id)
    assert output.text == result["summary"]
    assert {attempt for attempt, _ in output.chunks} == {state.attempt_count}

    recorded = await pg.journal(run_id)
    report = await HandlerKit(triage.handle, model=FakeModel(strict=True)).replay(recorded)
    assert report.ran == [] and report.model_calls == []
    assert report.result.value == result
    assert report.result.output.text == result["summary"]


async def test_a_ticket_nobody_answers_times_out_and_the_status_page_is_tried_three_times(
    awooop_postgres: PostgresKit,
) -> None:
    pg = awooop_postgres
    run_id = await pg.create({**TICKET, "reply_timeout_s": 60, "flaky_tries": 2})
    await pg.work(triage.handle)
    await pg.approve(run_id, by="lead")
    await pg.work(triage.handle)
    assert await pg.advance(timedelta(seconds=60)) == 1  # the reply's timeout
    for _ in range(2):  # two failed tries, each followed by a sleep
        await pg.work(triage.handle)
        assert (await pg.state(run_id)).waiting_for == "sleep"
        assert await pg.advance(timedelta(seconds=2)) == 1
    await pg.work(triage.handle)
    state = await pg.state(run_id)
    assert state.status == RunStatus.COMPLETED, state.failure_reason
    assert state.result["conversation"]["outcome"] == "no reply"
    assert state.result["status"]["tries"] == 3
    assert "customer: no reply\n" in state.result["summary"]
    assert [c[1] for c in await children_of(pg, run_id)] == ["COMPLETED"] * 3
    assert {"event:reply:1", "children:1", "sleep:1", "sleep:2"} <= set(state.saga_steps)
