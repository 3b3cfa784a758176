"""An in-memory span exporter on the process's tracer provider, for tests that assert on spans.

The OpenTelemetry API allows one global tracer provider per process, so the exporter is
installed once (through :func:`awooop.core.telemetry.configure_tracing`, the same call every process
makes) and each test clears it: use the ``spans`` fixture from ``tests/conftest.py``.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awooop.core.telemetry import configure_tracing

_exporter: InMemorySpanExporter | None = None


def memory_exporter() -> InMemorySpanExporter:
    """The process-wide in-memory exporter, installed on first use."""
    global _exporter  # one per process, like the tracer provider it hangs on
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        configure_tracing("awooop-tests", extra_processors=[SimpleSpanProcessor(_exporter)])
    return _exporter


def one_trace(exporter: InMemorySpanExporter, *names: str) -> dict[str, ReadableSpan]:
    """The finished spans named ``names`` (first of each), asserted to share one trace id.

    For end-to-end tests (R-50): ``one_trace(spans, "ingest ...", "relay publish", ...)``
    fails with the names and trace ids it found when the chain is broken.
    """
    finished = exporter.get_finished_spans()
    found: dict[str, ReadableSpan] = {}
    for span in finished:
        if span.name in names and span.name not in found:
            found[span.name] = span
    missing = [n for n in names if n not in found]
    assert not missing, f"no span named {missing}; have {sorted({s.name for s in finished})}"
    traces = {name: format(s.context.trace_id, "032x") for name, s in found.items()}
    assert len(set(traces.values())) == 1, f"spans are in different traces: {traces}"
    return found
