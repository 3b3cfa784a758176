"""An in-memory span exporter on the process's tracer provider, for tests that assert on spans.

The OpenTelemetry API allows one global tracer provider per process, so the exporter is
installed once (through :func:`awooop.telemetry.configure_tracing`, the same call every process
makes) and each test clears it: use the ``spans`` fixture from ``tests/conftest.py``.
"""

from __future__ import annotations

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awooop.telemetry import configure_tracing

_exporter: InMemorySpanExporter | None = None


def memory_exporter() -> InMemorySpanExporter:
    """The process-wide in-memory exporter, installed on first use."""
    global _exporter  # one per process, like the tracer provider it hangs on
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        configure_tracing("awooop-tests", extra_processors=[SimpleSpanProcessor(_exporter)])
    return _exporter
