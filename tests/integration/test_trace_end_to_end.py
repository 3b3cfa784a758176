"""One webhook, one trace: ingest -> outbox (event metadata) -> relay -> stream -> consume ->
lease claim -> run -> step -> pointer check -> LLM call (R-50), on real Postgres and Redis with
an in-memory span exporter. The relay publishes in batches: its span links to each producer."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from opentelemetry import trace

from awooop.core.config import Settings
from awooop.examples.handlers import handle
from awooop.http.app import create_app
from awooop.ingest import credentials
from awooop.llm.gateway import ModelGateway
from awooop.services import Services
from awooop.streams.relay import Relay
from tests.support.tracing import one_trace
from tests.support.waiting import eventually
from tests.support.workers import serving_worker, streaming_worker

PROJECT = "p-trace"


async def test_one_webhook_is_one_trace_from_ingest_to_the_llm_call(
    settings: Settings, spans: Any
) -> None:
    services = await Services.open(settings, db_pool_size=4)
    gateway = ModelGateway(services)
    try:
        await gateway.start()
        _, token = await credentials.create_token(services.db, PROJECT, "api")
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://awooop") as client:
            answer = await client.post(
                f"/v1/projects/{PROJECT}/channels/api",
                json={"text": "why is api-1 slow?"},
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": str(uuid.uuid4())},
            )
        assert answer.status_code == 202, answer.text
        relay = Relay(settings=settings, redis=services.redis, keys=services.keys)
        try:
            assert await relay.drain() >= 1
        finally:
            await relay.close()
        worker, intake = streaming_worker(
            services.db, settings, services.redis, handler=handle, concurrency=2, llm=gateway
        )
        run_id = uuid.UUID(str(answer.json()["run_ids"][0]))
        async with serving_worker(worker, intake):

            async def status() -> Any:
                async with services.db.tenant(PROJECT) as conn:
                    return await conn.fetchval(
                        "SELECT status FROM awooop_run_state WHERE run_id = $1", run_id
                    )

            await eventually(status, equals="COMPLETED", interval_s=0.1, what="the run's status")
    finally:
        await gateway.close()
        await services.close()

    finished = spans.get_finished_spans()
    [ingest] = [s for s in finished if s.name == "ingest"]
    trace_id = ingest.context.trace_id
    in_trace = {s.name: s for s in finished if s.context.trace_id == trace_id}
    wanted = [
        "ingest",
        "publish RunCreated",
        "consume RunCreated",
        "lease claim",
        "run",
        "step summarise",
        "llm.complete",
        "revision.pointer_check",
        "llm.call",
    ]
    assert [n for n in wanted if n not in in_trace] == [], sorted(in_trace)
    one_trace(spans, "ingest", "publish RunCreated", "consume RunCreated", "run", "llm.call")
    # ingest -> the relay's publish span -> the worker's consume span: a chain, not siblings
    publish, consume = in_trace["publish RunCreated"], in_trace["consume RunCreated"]
    assert publish.parent is not None and publish.parent.span_id == ingest.context.span_id
    assert consume.parent is not None and consume.parent.span_id == publish.context.span_id
    # The relay's batch span (one per batch, many traces) is not in it; it links to it.
    publishes = [s for s in finished if s.name == "relay publish"]
    assert any(
        link.context.trace_id == trace_id and link.context.span_id == ingest.context.span_id
        for s in publishes
        for link in s.links
    )
    assert in_trace["consume RunCreated"].parent is not None
    assert in_trace["llm.call"].kind in (trace.SpanKind.CLIENT, trace.SpanKind.INTERNAL)
