"""Worker observability: spans continue the announced trace, events carry it, logs carry the
run's context, and the lease metrics count (R-50, R-51, R-52)."""

from __future__ import annotations

from typing import Any

import msgspec
from opentelemetry import trace
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.core.telemetry import extract, inject, tracer
from awooop.eventlog import eventlog
from awooop.worker.runtime import Worker
from tests.support import handlers
from tests.support.logcapture import capture_context_logs
from tests.support.runs import create_runs
from tests.support.tracing import one_trace

P = "proj-t"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_run_continues_the_trace_of_its_message(
    db: Database, settings: Settings, spans: Any
) -> None:
    [run_id] = await create_runs(db, P, payload={})
    with tracer.start_as_current_span("relay publish") as producer:
        traceparent, _state = inject()
    claims = sample("awooop_lease_claims_total", path="stream")
    finished = sample("awooop_runs_finished_total", status="COMPLETED")
    worker = Worker(db=db, settings=settings, handler=handlers.journaled, concurrency=2)
    with capture_context_logs() as lines:
        assert await worker.take(run_id, P, path="stream", parent=extract(traceparent))
    found = one_trace(spans, "relay publish", "lease claim", "run", "step one", "step two")
    assert found["step one"].parent is not None
    assert found["step one"].parent.span_id == found["run"].context.span_id
    assert found["step one"].attributes is not None
    assert found["step one"].attributes["awooop.step.replayed"] is False
    trace_id = format(producer.get_span_context().trace_id, "032x")
    async with db.tenant(P) as conn:
        recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    written = [e for e in recorded if e.event_type != "RunCreated"]
    assert written and all(trace_id in e.metadata["traceparent"] for e in written)
    [done] = [line for line in lines if line["event"] == "attempt_finished"]
    assert done["run_id"] == str(run_id) and done["project_id"] == P
    assert done["trace_id"] == trace_id and done["outcome"] == "completed"
    assert sample("awooop_lease_claims_total", path="stream") == claims + 1
    assert sample("awooop_runs_finished_total", status="COMPLETED") == finished + 1
    assert trace.get_current_span().get_span_context().is_valid is False


async def test_heartbeats_count_renewals(db: Database, settings: Settings) -> None:
    run_ids = await create_runs(db, P, 3, payload={"hang_on_attempts": [1]})
    fast = msgspec.structs.replace(settings, heartbeat_interval_s=0.1)
    worker = Worker(db=db, settings=fast, handler=handlers.journaled, concurrency=4)
    assert await worker.poll_once(0) == 3
    before = sample("awooop_lease_renewals_total")
    renewed = await worker.heartbeat.beat()
    assert renewed == set(run_ids)
    assert sample("awooop_lease_renewals_total") == before + 3
    await worker.drain(0.0)
