"""Tracing and metrics endpoints really work (R-50, R-51, R-52).

- The OTLP http/protobuf exporter, configured only by the standard ``OTEL_*`` variables,
  sends spans to a local HTTP endpoint; the test decodes the ExportTraceServiceRequest.
- ``serve_metrics`` serves the default registry.
- Standard-library log records come out as JSON with the same context fields.
"""

from __future__ import annotations

import io
import json
import urllib.request

import pytest

from awooop.core import metrics
from awooop.core.context import bound
from awooop.core.logs import configure_logging
from awooop.core.telemetry import build_tracer_provider, serve_metrics
from tests.support.otlp import Collector, decode


def test_otlp_exporter_sends_protobuf_spans(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-scope-orgid=awooop-test")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "awooop-export-test")
    provider = build_tracer_provider("ignored-default")
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("ingest webhook") as parent:
        with tracer.start_as_current_span("outbox write"):
            pass
        trace_id = parent.get_span_context().trace_id
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert collector.received.wait(10)

    path, headers, body = collector.requests[0]
    assert path == "/v1/traces"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers.get("x-scope-orgid") == "awooop-test"
    request = decode(headers, body)
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}[
        "service.name"
    ]
    assert service == "awooop-export-test"
    exported = [s for scope in resource_spans.scope_spans for s in scope.spans]
    assert sorted(s.name for s in exported) == ["ingest webhook", "outbox write"]
    assert {s.trace_id for s in exported} == {trace_id.to_bytes(16, "big")}
    child = next(s for s in exported if s.name == "outbox write")
    root = next(s for s in exported if s.name == "ingest webhook")
    assert child.parent_span_id == root.span_id


def test_without_an_endpoint_nothing_is_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    provider = build_tracer_provider("x")
    assert provider._active_span_processor._span_processors == ()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    provider = build_tracer_provider("x")
    assert provider._active_span_processor._span_processors == ()


def test_serve_metrics_serves_the_registry() -> None:
    from awooop.demo.servers import free_port

    metrics.DEAD_LETTERS.inc(0)
    server = serve_metrics(free_port(), addr="127.0.0.1")
    assert server is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.close()
    assert "awooop_dead_letters_total" in text
    assert "awooop_background_loop_last_run_timestamp" in text or "awooop_runs" in text
    assert serve_metrics(0) is None


def test_standard_library_log_lines_carry_the_context() -> None:
    import logging

    out = io.StringIO()
    configure_logging("info", stream=out)
    try:
        with bound(project_id="p-std", run_id="r-1", trace_id="ab" * 16):
            logging.getLogger("some.library").warning("disk %s", "full")
    finally:
        configure_logging("warning")
    line = json.loads(out.getvalue().strip().splitlines()[-1])
    assert line["event"] == "disk full"
    assert line["project_id"] == "p-std" and line["run_id"] == "r-1"
    assert line["trace_id"] == "ab" * 16
    assert line["level"] == "warning" and line["logger"] == "some.library"
