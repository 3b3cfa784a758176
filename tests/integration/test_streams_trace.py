"""One trace from the producer through the outbox, relay and stream to the consumer (R-50)."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awooop.core.config import Settings
from awooop.core.context import project_id_var, run_id_var, trace_id_var
from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.core.telemetry import inject, tracer
from awooop.streams.consumer import GroupConsumer
from awooop.streams.keys import projector_group
from awooop.streams.reclaim import autoclaim
from awooop.streams.relay import Relay
from awooop.streams.tracing import consume_span
from tests.support.logcapture import capture_context_logs
from tests.support.streams import Collector, create_run, keys_for
from tests.support.tracing import one_trace


async def test_the_consumer_span_continues_the_producer_trace(
    settings: Settings, db: Database, spans: InMemorySpanExporter
) -> None:
    redis = aioredis.Redis.from_url(settings.redis_url)
    keys = keys_for(settings)
    try:
        with tracer.start_as_current_span("ingest webhook") as producer:
            traceparent, tracestate = inject()
            await create_run(db, "p1", {"traceparent": traceparent, "tracestate": tracestate})
        producer_ctx = producer.get_span_context()

        relay = Relay(settings=settings, redis=redis, keys=keys)
        try:
            await relay.drain()
        finally:
            await relay.close()

        stream = keys.events_stream(keys.shard_of("p1"))
        first = Collector(ok=False)  # leave it pending, to be redelivered
        group = projector_group("trace")
        consumer = GroupConsumer(
            redis, group=group, consumer="c1", streams=[stream], handler=first, keys=keys
        )
        assert await consumer.run_until_idle() == 1

        # producer -> the relay's publish span -> the consumer: one trace
        [publish] = [s for s in spans.get_finished_spans() if s.name == "publish RunCreated"]
        assert publish.context.trace_id == producer_ctx.trace_id
        assert publish.parent is not None and publish.parent.span_id == producer_ctx.span_id
        [consume] = [s for s in spans.get_finished_spans() if s.name == "consume RunCreated"]
        assert consume.context.trace_id == producer_ctx.trace_id
        assert consume.parent is not None and consume.parent.span_id == publish.context.span_id
        assert consume.attributes is not None
        assert consume.attributes["awooop.delivery_count"] == 1

        # A redelivery starts a new trace, linked to the span that published it.
        await asyncio.sleep(0.02)  # the entry idles past min_idle_ms
        [again] = await autoclaim(redis, stream, group, "c2", min_idle_ms=10)
        assert again.delivery_count == 2
        with consume_span(again):
            pass
        redelivered = [s for s in spans.get_finished_spans() if s.name == "consume RunCreated"][1]
        assert redelivered.context.trace_id != producer_ctx.trace_id
        assert redelivered.parent is None
        assert [link.context.span_id for link in redelivered.links] == [publish.context.span_id]
        assert [link.context.trace_id for link in redelivered.links] == [producer_ctx.trace_id]

        # The relay's batch span links the producer span too.
        [batch] = [s for s in spans.get_finished_spans() if s.name == "relay publish"]
        assert producer_ctx.span_id in [link.context.span_id for link in batch.links]
        one_trace(spans, "ingest webhook", "publish RunCreated", "consume RunCreated")
    finally:
        await redis.aclose()


async def test_the_handler_runs_with_project_run_and_trace_in_context(
    settings: Settings, db: Database, spans: InMemorySpanExporter
) -> None:
    """Log lines written inside a handler carry the project, the run and the producer's trace."""
    redis = aioredis.Redis.from_url(settings.redis_url)
    keys = keys_for(settings)
    seen: list[dict[str, Any]] = []
    try:
        with tracer.start_as_current_span("producer") as producer:
            traceparent, _ = inject()
            run_id = await create_run(db, "p1", {"traceparent": traceparent})
        relay = Relay(settings=settings, redis=redis, keys=keys)
        try:
            await relay.drain()
        finally:
            await relay.close()

        async def handler(_: Any) -> bool:
            seen.append(
                {
                    "project": project_id_var.get(),
                    "run": run_id_var.get(),
                    "trace": trace_id_var.get(),
                }
            )
            get_logger("handler").info("handled")
            return True

        consumer = GroupConsumer(
            redis,
            group="workers",
            consumer="w1",
            streams=[keys.work_stream(keys.shard_of("p1"))],
            handler=handler,
            keys=keys,
        )
        with capture_context_logs() as logs:
            assert await consumer.run_until_idle() == 1
        trace_id = format(producer.get_span_context().trace_id, "032x")
        assert seen == [{"project": "p1", "run": str(run_id), "trace": trace_id}]
        [line] = [line for line in logs if line["event"] == "handled"]
        assert (line["project_id"], line["run_id"], line["trace_id"]) == (
            "p1",
            str(run_id),
            trace_id,
        )
    finally:
        await redis.aclose()
