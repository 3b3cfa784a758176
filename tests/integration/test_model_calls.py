"""Every model call of a run is recorded (``ModelCalled`` on the run's stream, fenced) and
listed with the policy revision that served it on the console's run page and in ``awooop runs
show``: a real worker, the real gateway with the local model, real Postgres."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import ModelUnavailableError
from awooop.core.events import ModelCalled, decode_event, run_stream_id
from awooop.eventlog import eventlog
from awooop.eventlog.state import fold
from awooop.ingest import credentials
from awooop.llm.admission import Admit
from awooop.llm.gateway import DEFAULT_CONTRACT, LLMResult, ModelCall, ModelGateway
from awooop.revisions.service import Revisions
from awooop.runs import leases
from awooop.services import Services, redis_client
from awooop.streams.keys import Keys
from awooop.worker.context import RunContext
from awooop.worker.runtime import Worker
from tests.integration.test_console import log_in
from tests.support.http import app_client
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually

P = "proj-model-calls"
TRACE_URL = "https://tempo.example/explore?trace={trace_id}"
ROW = re.compile(r'<tr class="model-call">(.*?)</tr>', re.DOTALL)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.DOTALL)
REVISION = re.compile(r'class="revision" title="([^"]+)"')


async def open_gateway(settings: Settings, db: Database) -> tuple[ModelGateway, Services]:
    services = Services(
        settings=settings,
        db=db,
        redis=redis_client(settings.redis_url),
        keys=Keys(settings.redis_key_prefix, settings.shard_count),
    )
    gateway = ModelGateway(services)
    await gateway.start()
    return gateway, services


@pytest.fixture
async def gateway(settings: Settings, db: Database) -> AsyncIterator[ModelGateway]:
    gw, services = await open_gateway(settings, db)
    yield gw
    await gw.close()
    await services.redis.aclose()


async def recorded_calls(db: Database, run_id: uuid.UUID) -> list[ModelCalled]:
    async with db.tenant(P) as conn:
        events = await eventlog.read_stream(conn, run_stream_id(run_id))
    return [e.decode() for e in events if e.event_type == "ModelCalled"]


async def calls_count(db: Database, run_id: uuid.UUID) -> int:
    return len(await recorded_calls(db, run_id))


async def awooop_json(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    args = build_parser().parse_args(list(argv))
    assert await args.run(settings, args) == 0
    return msgspec.json.decode(capsys.readouterr().out)


async def test_each_call_is_listed_with_the_revision_that_served_it(
    db: Database,
    settings: Settings,
    gateway: ModelGateway,
    spans: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, *DEFAULT_CONTRACT, {"model": "model-a"})
    await revisions.activate(P, *DEFAULT_CONTRACT, r1.revision_id)
    changed = asyncio.Event()

    async def handle(run: RunContext) -> list[str]:
        answers = [await run.llm("first"), await run.llm("second")]
        await changed.wait()  # the test activates another revision meanwhile
        answers.append(await run.llm("third"))
        return [str(a.revision_id) for a in answers]

    [run_id] = await create_runs(db, P, payload={})
    worker = Worker(db=db, settings=settings, handler=handle, llm=gateway, concurrency=1)
    burst = asyncio.create_task(worker.run_until_idle(max_s=120))
    try:
        # Each call is on the log as soon as it returned, before the run ends.
        await eventually(
            lambda: calls_count(db, run_id),
            equals=2,
            what="the first two model calls recorded",
            timeout_s=60,
        )
        r2 = await revisions.create(P, *DEFAULT_CONTRACT, {"model": "model-b"})
        await revisions.activate(P, *DEFAULT_CONTRACT, r2.revision_id)
        changed.set()
        assert await asyncio.wait_for(burst, timeout=120) == 1
    finally:
        changed.set()
        if not burst.done():
            burst.cancel()
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED", state.failure_reason
    expected = [r1, r1, r2]
    assert state.result == [str(r.revision_id) for r in expected]

    calls = await recorded_calls(db, run_id)
    assert [(c.model, c.revision_id, c.body_hash) for c in calls] == [
        ("model-a", r1.revision_id, r1.body_hash),
        ("model-a", r1.revision_id, r1.body_hash),
        ("model-b", r2.revision_id, r2.body_hash),
    ]
    assert {(c.attempt, c.worker_id, c.outcome, c.reason) for c in calls} == {
        (1, worker.worker_id, "ok", "")
    }
    assert all(c.duration_ms >= 0 and c.started_at <= c.at for c in calls)
    # The row is apply() folded over the events: a model call moved only the version.
    async with db.tenant(P) as conn:
        stream = await eventlog.read_stream(conn, run_stream_id(run_id))
    assert fold([decode_event(e.data) for e in stream]) == state

    shown = await awooop_json(settings, capsys, "runs", "show", str(run_id), "--json")
    listed = shown["model_calls"]
    assert [(c["revision_id"], c["body_hash"], c["model"]) for c in listed] == [
        (str(r.revision_id), r.body_hash, m)
        for r, m in zip(expected, ["model-a", "model-a", "model-b"], strict=True)
    ]
    assert {
        (c["contract_family"], c["contract_id"], c["outcome"], c["attempt"]) for c in listed
    } == {("policy_routing", "default", "ok", 1)}
    by_version = {t["version"]: t for t in shown["timeline"]}
    assert all(by_version[c["version"]]["event_type"] == "ModelCalled" for c in listed)
    trace_ids = {c["trace_id"] for c in listed}
    assert len(trace_ids) == 1 and None not in trace_ids  # the attempt's trace

    args = build_parser().parse_args(["runs", "show", P, str(run_id)])
    assert await args.run(settings, args) == 0
    text = capsys.readouterr().out
    assert "model calls: 3" in text and str(r2.revision_id) in text
    assert r2.body_hash.removeprefix("sha256:")[:12] in text and r2.body_hash not in text

    _, token = await credentials.create_management_token(db, P, "read")
    console = msgspec.structs.replace(settings, console_trace_url=TRACE_URL)
    async with app_client(console, db) as http:
        await log_in(http, token)
        page = await http.get(f"/ui/runs/{P}/{run_id}")
    assert page.status_code == 200 and "<h2>Model calls</h2>" in page.text
    rows = [CELL.findall(row) for row in ROW.findall(page.text)]
    # Columns: #, started, attempt, model, contract, revision, body hash, duration, outcome,
    # tokens in/out, trace
    assert [(row[3], row[4], row[8]) for row in rows] == [
        ("model-a", "policy_routing/default", "ok"),
        ("model-a", "policy_routing/default", "ok"),
        ("model-b", "policy_routing/default", "ok"),
    ]
    assert [REVISION.findall(row[5]) for row in rows] == [[str(r.revision_id)] for r in expected]
    assert [row[6] for row in rows] == [
        f'<span title="{r.body_hash}">{r.body_hash.removeprefix("sha256:")[:12]}</span>'
        for r in expected
    ]
    (trace_id,) = trace_ids
    link = html.escape(TRACE_URL.replace("{trace_id}", trace_id))
    assert all(f'<a href="{link}">{trace_id}</a>' == row[10] for row in rows)

    # The management API's run route lists them too.
    _, manage = await credentials.create_management_token(db, P, "manage")
    async with app_client(settings, db) as api:
        response = await api.get(
            f"/v1/projects/{P}/runs/{run_id}", headers={"Authorization": f"Bearer {manage}"}
        )
    assert response.status_code == 200
    calls = response.json()["model_calls"]
    assert [c["revision_id"] for c in calls] == [str(r.revision_id) for r in expected]
    assert [(c["model"], c["outcome"]) for c in calls] == [
        ("model-a", "ok"),
        ("model-a", "ok"),
        ("model-b", "ok"),
    ]


async def test_a_failed_call_is_recorded_with_its_code_and_the_handler_gets_the_error(
    db: Database, settings: Settings
) -> None:
    # Nothing listens on port 9 of the loopback: the model client is refused at once.
    unreachable = msgspec.structs.replace(settings, llm_url="http://127.0.0.1:9")
    gateway, services = await open_gateway(unreachable, db)

    async def handle(run: RunContext) -> str:
        try:
            await run.llm("anyone there?")
        except ModelUnavailableError as exc:
            return exc.code
        return "answered"

    try:
        [run_id] = await create_runs(db, P, payload={})
        worker = Worker(db=db, settings=settings, handler=handle, llm=gateway, concurrency=1)
        assert await worker.run_until_idle() == 1
    finally:
        await gateway.close()
        await services.redis.aclose()
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", "E-LLM-001")
    # E-LLM-001 is retryable: the default policy tried three times, each try recorded.
    calls = await recorded_calls(db, run_id)
    assert [c.try_number for c in calls] == [1, 2, 3]
    assert [c.next_try_in_s is None for c in calls] == [False, False, True]
    for call in calls:
        assert (call.outcome, call.model, call.revision_id, call.body_hash) == (
            "E-LLM-001",
            settings.llm_default_model,
            None,
            None,
        )
        assert call.reason.startswith("ModelUnavailableError: ")


class StealsTheLeaseFirst:
    """A model client that, during the first call, lets the attempt's lease run out and the
    reaper requeue the run (a stalled worker), then answers as the gateway does."""

    def __init__(self, gateway: ModelGateway, db: Database, run_id: uuid.UUID) -> None:
        self.gateway, self.db, self.run_id = gateway, db, run_id
        self.stolen = False

    async def call(
        self,
        project_id: str,
        prompt: str,
        *,
        contract: tuple[str, str] = DEFAULT_CONTRACT,
        options: Mapping[str, Any] | None = None,
        admit: Admit | None = None,
    ) -> ModelCall:
        if not self.stolen:
            self.stolen = True

            async def stall_and_reap(conn: Connection) -> list[Any]:
                await conn.execute(
                    "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
                    "WHERE run_id = $1",
                    self.run_id,
                )
                return await leases.reap(conn, 10)

            assert len(await self.db.in_platform_writes(stall_and_reap)) == 1
        return await self.gateway.call(
            project_id, prompt, contract=contract, options=options, admit=admit
        )


async def test_an_attempt_that_lost_its_lease_records_no_call(
    db: Database, settings: Settings, gateway: ModelGateway
) -> None:
    answers: list[LLMResult] = []

    async def handle(run: RunContext) -> int:
        answers.append(await run.llm("hello"))
        return run.attempt

    [run_id] = await create_runs(db, P, payload={})
    client = StealsTheLeaseFirst(gateway, db, run_id)
    worker = Worker(db=db, settings=settings, handler=handle, llm=client, concurrency=1)
    assert await worker.run_until_idle() == 2  # attempt 1 lost its lease, attempt 2 completed
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", 2)
    # Attempt 1's answer never reached its handler: its record was refused by the fence.
    assert len(answers) == 1
    [call] = await recorded_calls(db, run_id)
    assert call.attempt == 2 and call.outcome == "ok"
