"""A projector makes one span per batch, not one per event, sampled as an iteration of its loop
(R-50): real Postgres and Redis, the relay, the projectors' stream consumers as the projector
loops build them, an in-memory span exporter."""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awooop.core.db import Database
from awooop.core.loop_sampling import LOOP_ATTRIBUTE
from awooop.core.telemetry import inject, set_loop_sample_ratio, tracer
from awooop.loops.projector import consumer_for
from awooop.projections.registry import get, projector_names
from awooop.projections.runner import Projector
from awooop.services import Services
from awooop.streams.relay import Relay
from tests.support.projection_deliveries import LogDelivery, log_envelopes
from tests.support.streams import create_run

PROJECT = "p-proj-spans"


def batch_spans(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == f"project {name}"]


def attribute(span: ReadableSpan, key: str) -> object:
    return (span.attributes or {})[key]


async def traced_runs(db: Database, count: int) -> None:
    with tracer.start_as_current_span("ingest webhook"):
        traceparent, tracestate = inject()
        for _ in range(count):
            await create_run(db, PROJECT, {"traceparent": traceparent, "tracestate": tracestate})


async def test_a_projector_makes_one_span_per_batch_sampled_as_its_loop(
    db: Database, spans: InMemorySpanExporter
) -> None:
    await traced_runs(db, 5)
    deliveries = [LogDelivery(e) for e in await log_envelopes(db)]
    assert len(deliveries) == 5
    projector = Projector(db, get("run_timeline"))
    spans.clear()

    # Deliveries handled together are one batch, one transaction, one span.
    assert all(await asyncio.gather(*(projector.handle(d) for d in deliveries[:3])))
    assert all(await asyncio.gather(*(projector.handle(d) for d in deliveries)))
    first, second = batch_spans(spans, "run_timeline")
    for span, events, applied, duplicates in ((first, 3, 3, 0), (second, 5, 2, 3)):
        assert span.parent is None  # a trace of its own, not a span in each event's trace
        assert attribute(span, LOOP_ATTRIBUTE) == "projector:run_timeline"
        assert attribute(span, "awooop.events") == events
        assert attribute(span, "awooop.applied") == applied
        assert attribute(span, "awooop.duplicates") == duplicates
    assert not [s for s in spans.get_finished_spans() if s.name.startswith("consume ")]

    # Sampled as the projector's loop iterations: at ratio 0 a batch that succeeds is not
    # exported.
    set_loop_sample_ratio(0.0)  # the spans fixture restores it
    await traced_runs(db, 1)
    [new] = [LogDelivery(e) for e in await log_envelopes(db)][5:]
    assert await projector.handle(new)
    assert len(batch_spans(spans, "run_timeline")) == 2


async def test_projector_consumers_make_no_span_per_message(
    services: Services, db: Database, spans: InMemorySpanExporter
) -> None:
    await traced_runs(db, 8)
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    try:
        assert await relay.drain() == 8
    finally:
        await relay.close()
    spans.clear()
    for name in projector_names():
        consumer = consumer_for(services, Projector(db, get(name)), "c1")
        assert await consumer.run_until_idle() == 8
    finished = spans.get_finished_spans()
    assert not [s for s in finished if s.name.startswith("consume ")], [s.name for s in finished]
    # run_state_view and run_timeline follow RunCreated; revision_history follows none of it
    # and makes no span at all.
    assert batch_spans(spans, "revision_history") == []
    for name in ("run_state_view", "run_timeline"):
        batches = batch_spans(spans, name)
        assert sum(int(attribute(s, "awooop.events")) for s in batches) == 8  # type: ignore[call-overload]
        assert 1 <= len(batches) < 8, [attribute(s, "awooop.events") for s in batches]
        assert all(not s.links for s in batches)
