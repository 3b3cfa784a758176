"""The facts an operator needs on the run page and in ``awooop runs show``: a failure's step and
traceback, the step a running run is in, and its model calls' prompts, answers and tokens.
A real worker, the real gateway with the local model, real Postgres and Redis."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError
from awooop.core.events import LeaseReleased, ModelCalled, RunFailed, StepCompleted, run_stream_id
from awooop.eventlog import eventlog
from awooop.ingest import credentials
from awooop.llm.calls import TEXT_CHARS
from awooop.llm.gateway import ModelGateway
from awooop.llm.local import local_tokens
from awooop.runs import leases, run_rows
from awooop.worker.context import RunContext
from awooop.worker.runtime import Worker
from tests.integration.test_console import log_in
from tests.integration.test_model_calls import gateway  # noqa: F401 - the fixture
from tests.support.factories import event_for
from tests.support.http import app_client
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually

P = "proj-run-facts"
SECRET_URL = "postgresql://app:hunter2@db.internal/orders"
ROW = re.compile(r'<tr class="model-call">(.*?)</tr>', re.DOTALL)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.DOTALL)


async def events_of(db: Database, run_id: uuid.UUID) -> list[Any]:
    async with db.tenant(P) as conn:
        recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    return [r.decode() for r in recorded]


async def run_page(settings: Settings, db: Database, run_id: uuid.UUID) -> str:
    _, token = await credentials.create_management_token(db, P, "read")
    async with app_client(settings, db) as http:
        await log_in(http, token)
        page = await http.get(f"/ui/runs/{P}/{run_id}")
    assert page.status_code == 200
    return page.text


async def shown(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    args = build_parser().parse_args(["runs", "show", *argv])
    assert await args.run(settings, args) == 0
    return capsys.readouterr().out


def reserve(sku: str) -> None:
    # A message that quotes a secret, as a driver's error would.
    raise KeyError(f"{sku} (cannot reach {SECRET_URL})")


async def test_a_failure_keeps_its_step_and_traceback_and_the_run_page_shows_them(
    db: Database, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    async def handle(run: RunContext) -> str:
        await run.step("lookup", lambda: asyncio.sleep(0, "found"))

        async def reserve_stock() -> None:
            reserve("sku-42")

        await run.step("reserve_stock", reserve_stock)
        return "unreachable"

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=settings, handler=handle, concurrency=1)
    assert await worker.run_until_idle() == 1
    state = await load(db, P, run_id)
    assert state.status == "FAILED" and state.failure_reason is not None

    [failed] = [e for e in await events_of(db, run_id) if isinstance(e, RunFailed)]
    assert failed.step == "reserve_stock"
    assert failed.traceback.startswith("Traceback (most recent call last):")
    assert "in reserve_stock" in failed.traceback and "in reserve" in failed.traceback
    assert "KeyError" in failed.traceback.splitlines()[-1]
    assert "hunter2" not in failed.traceback and "[redacted]" in failed.traceback
    [lookup] = [e for e in await events_of(db, run_id) if isinstance(e, StepCompleted)]
    assert lookup.started_at is not None and lookup.started_at <= lookup.at

    page = await run_page(settings, db, run_id)
    assert 'id="failure"' in page
    assert '<code class="mono" id="failure-step">reserve_stock</code>' in page
    block = re.search(
        r'<details open><summary>traceback</summary><pre id="traceback">(.*?)</pre>',
        page,
        re.DOTALL,
    )
    assert block is not None and html.unescape(block.group(1)) == failed.traceback
    # The reason is redacted as the traceback is.
    assert (
        state.failure_reason
        == "KeyError: 'sku-42 (cannot reach postgresql://app:[redacted]@db.internal/orders)'"
    )
    assert 'id="failure-reason">KeyError: &#39;sku-42' in page and state.failure_code in page
    assert "hunter2" not in page

    view = msgspec.json.decode(await shown(settings, capsys, P, str(run_id), "--json"))
    [listed] = view["failures"]
    assert (listed["step"], listed["traceback"], listed["retried"]) == (
        "reserve_stock",
        failed.traceback,
        False,
    )
    text = await shown(settings, capsys, P, str(run_id))
    assert "failures: 1" in text and "failed at" in text and "in step reserve_stock" in text


async def test_an_attempt_given_back_keeps_its_traceback_and_the_retry_goes_on(
    db: Database, settings: Settings
) -> None:
    async def handle(run: RunContext) -> int:
        async def write_ledger() -> None:
            if run.attempt == 1:
                raise DatabaseUnavailableError("the journal write failed")

        await run.step("write_ledger", write_ledger)
        return run.attempt

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=settings, handler=handle, concurrency=1)
    assert await worker.run_until_idle() == 2
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", 2)
    [released] = [e for e in await events_of(db, run_id) if isinstance(e, LeaseReleased)]
    assert released.step == "write_ledger" and not released.charged
    assert "DatabaseUnavailableError" in released.traceback

    page = await run_page(settings, db, run_id)
    assert 'class="earlier-failure"' in page and "was given back" in page
    assert "DatabaseUnavailableError" in page


@pytest.mark.fast("worker")
async def test_a_running_run_shows_the_step_it_is_in(
    db: Database, fast: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    async def handle(run: RunContext) -> str:
        await run.step("quick", lambda: asyncio.sleep(0, 1))

        async def reserve_stock() -> str:
            entered.set()
            await release.wait()
            return "reserved"

        return await run.step("reserve_stock", reserve_stock)

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=fast, handler=handle, concurrency=1)
    burst = asyncio.create_task(worker.run_until_idle(max_s=120))
    try:
        await asyncio.wait_for(entered.wait(), timeout=60)

        async def page_step() -> str | None:
            found = re.search(
                r'<td id="current-step"[^>]*>(.*?)</td>',
                await run_page(fast, db, run_id),
                re.DOTALL,
            )
            return None if found is None else found.group(1)

        # The heartbeat reports the step with its next renewal.
        header = await eventually(page_step, what="the run page names the running step")
        assert 'in step <code class="mono">reserve_stock</code> for ' in header
        assert "(since " in header and " UTC)" in header
        text = await shown(fast, capsys, P, str(run_id))
        blocked_line = text.splitlines()[0]
        assert blocked_line.startswith("blocked_on: running")
        assert "in step `reserve_stock` since " in blocked_line
        view = msgspec.json.decode(await shown(fast, capsys, P, str(run_id), "--json"))
        assert view["blocked_on"]["step"] == "reserve_stock"
        assert view["blocked_on"]["step_started_at"] is not None
    finally:
        release.set()
    assert await asyncio.wait_for(burst, timeout=120) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", "reserved")
    assert 'id="current-step"' not in await run_page(fast, db, run_id)
    [_, step] = [e for e in await events_of(db, run_id) if isinstance(e, StepCompleted)]
    assert step.step == "reserve_stock" and step.started_at is not None
    # The step started before it was written: while the handler waited, at least one renewal.
    assert step.started_at < step.at


async def test_model_calls_keep_capped_prompts_answers_and_tokens_with_totals(
    db: Database,
    settings: Settings,
    gateway: ModelGateway,  # noqa: F811 - the fixture
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_prompt = "summarise " * 1000  # 10,000 characters, 1,000 words

    async def handle(run: RunContext) -> list[str]:
        first = await run.llm("why is the disk full?")
        second = await run.llm(long_prompt)
        return [first.text, second.text]

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=settings, handler=handle, llm=gateway, concurrency=1)
    assert await worker.run_until_idle() == 1
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    calls = [e for e in await events_of(db, run_id) if isinstance(e, ModelCalled)]
    assert [c.input_tokens for c in calls] == [5, 1000]
    assert [c.output_tokens for c in calls] == [local_tokens(a) for a in state.result]
    assert calls[0].prompt == "why is the disk full?" and calls[0].answer == state.result[0]
    assert len(calls[1].prompt) == TEXT_CHARS and "characters cut" in calls[1].prompt
    assert calls[1].prompt.startswith("summarise summarise")
    total_in = 1005
    total_out = sum(local_tokens(a) for a in state.result)

    page = await run_page(settings, db, run_id)
    assert f"tokens: {total_in} in, {total_out} out" in page
    rows = [CELL.findall(row) for row in ROW.findall(page)]
    assert [row[9] for row in rows] == [f"{c.input_tokens}/{c.output_tokens}" for c in calls]
    assert '<pre class="prompt">why is the disk full?</pre>' in page
    assert f'<pre class="answer">{html.escape(state.result[0])}</pre>' in page
    assert "<details><summary>prompt and answer</summary>" in page

    view = msgspec.json.decode(await shown(settings, capsys, P, str(run_id), "--json"))
    assert view["tokens"] == {
        "input_tokens": total_in,
        "output_tokens": total_out,
        "counted": 2,
        "calls": 2,
    }
    assert [c["prompt"] for c in view["model_calls"]] == [c.prompt for c in calls]
    assert [c["input_tokens"] for c in view["model_calls"]] == [5, 1000]
    text = await shown(settings, capsys, P, str(run_id))
    assert f"tokens: {total_in} in, {total_out} out" in text
    assert "why is the disk full?" in text and state.result[0] in text


async def test_the_renewal_writes_the_step_clears_it_between_steps_and_drops_a_journaled_one(
    db: Database,
) -> None:
    [run_id] = await create_runs(db, P)
    async with db.tenant(P) as conn:
        await run_rows.record(conn, run_id, lambda s, now: event_for("RunClaimed", s, at=now))
        state = await run_rows.record(
            conn, run_id, lambda s, now: event_for("StepCompleted", s, at=now)
        )
    worker, attempt = state.worker_id or "", state.attempt_count
    started = datetime.now(UTC)

    async def renew(steps: dict[uuid.UUID, tuple[str, datetime]]) -> Any:
        assert await db.in_platform_writes(
            lambda c: leases.heartbeat(c, worker, {run_id: attempt}, 600, steps)
        ) == {run_id}
        async with db.platform() as conn:
            row = await conn.fetchrow(
                "SELECT current_step, current_step_started_at, current_step_attempt "
                "FROM awooop_run_state WHERE run_id = $1",
                run_id,
            )
        return tuple(row.values())

    assert await renew({run_id: ("s2", started)}) == ("s2", started, attempt)
    assert await renew({}) == (None, None, attempt)  # between steps
    # "s1" is journaled already (its StepCompleted committed before this renewal arrived)
    assert await renew({run_id: ("s1", started)}) == (None, None, attempt)
