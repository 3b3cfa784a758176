"""Tracing and the metrics endpoint (R-50, R-51).

Tracing is configured by the standard OpenTelemetry environment variables
(``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_TRACES_SAMPLER``, ``OTEL_SDK_DISABLED`` ...) with the OTLP http/protobuf exporter, which
Grafana Tempo accepts on port 4318. Without an endpoint configured, spans are still created
(trace ids reach the logs) but nothing is exported.

Trace context travels in stream envelopes as W3C ``traceparent``/``tracestate``:
:func:`inject` reads the current span's context, :func:`extract` turns it back into a parent.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import start_http_server

tracer = trace.get_tracer("awooop")
_propagator = TraceContextTextMapPropagator()
_configured: TracerProvider | None = None
_exporting = False  # whether the installed provider sends spans anywhere


def build_tracer_provider(
    service_name: str, extra_processors: list[SpanProcessor] | None = None
) -> TracerProvider:
    """A tracer provider configured from the ``OTEL_*`` environment, not yet installed.

    With an OTLP endpoint configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) spans are batched to the OTLP http/protobuf
    exporter; the exporter itself reads the rest of its settings (headers, timeout,
    compression, certificates) from the standard variables.
    """
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    if _otlp_configured():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    for processor in extra_processors or []:
        provider.add_span_processor(processor)
    return provider


def configure_tracing(
    service_name: str, extra_processors: list[SpanProcessor] | None = None
) -> TracerProvider:
    """Install the SDK tracer provider once per process; later calls return the first one
    (adding ``extra_processors`` to it)."""
    global _configured, _exporting  # one provider per process, as the OTel API demands
    _exporting = _exporting or bool(extra_processors) or _otlp_configured()
    if _configured is not None:
        for processor in extra_processors or []:
            _configured.add_span_processor(processor)
        return _configured
    provider = build_tracer_provider(service_name, extra_processors)
    trace.set_tracer_provider(provider)
    _configured = provider
    return provider


def exporting() -> bool:
    """Whether spans leave this process (an OTLP endpoint or an added processor): spans made
    only for a trace view, many per batch, are skipped when nobody would see them."""
    return _exporting


def _otlp_configured() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return False
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def shutdown_tracing() -> None:
    if _configured is not None:
        _configured.force_flush()
        _configured.shutdown()


def inject(context: Context | None = None) -> tuple[str | None, str | None]:
    """(traceparent, tracestate) of the current (or given) context."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=context)
    return carrier.get("traceparent"), carrier.get("tracestate")


def extract(traceparent: str | None, tracestate: str | None = None) -> Context:
    carrier = {}
    if traceparent:
        carrier["traceparent"] = traceparent
        if tracestate:
            carrier["tracestate"] = tracestate
    return _propagator.extract(carrier)


def span_link(traceparent: str | None, tracestate: str | None = None) -> list[trace.Link]:
    """A link to the span named by ``traceparent`` (for redeliveries), or none."""
    span_context = trace.get_current_span(extract(traceparent, tracestate)).get_span_context()
    return [trace.Link(span_context)] if span_context.is_valid else []


def current_trace_id() -> str | None:
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None


class MetricsServer:
    """A running ``/metrics`` endpoint (the default Prometheus registry) on its own thread."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(port: int, addr: str = "0.0.0.0") -> MetricsServer | None:  # noqa: S104 - scraped from outside
    """Serve the default Prometheus registry on ``port`` (0: do nothing)."""
    if port <= 0:
        return None
    server, thread = start_http_server(port, addr=addr)
    return MetricsServer(server, thread)


@dataclass
class Observability:
    """What :func:`start_observability` started; :meth:`close` flushes spans, stops /metrics.

    The provider itself shuts down at interpreter exit (the SDK registers that), so a process
    may open and close observability more than once (tests do)."""

    provider: TracerProvider
    metrics: MetricsServer | None

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        self.provider.force_flush()


def start_observability(service_name: str, metrics_port: int) -> Observability:
    """Every long-running process calls this once at start: tracing from ``OTEL_*`` and
    ``/metrics`` on ``metrics_port`` (``AWOOOP_METRICS_PORT``; 0 leaves it off, e.g. for
    ``awooop serve``, whose HTTP app has its own ``/metrics`` route)."""
    provider = configure_tracing(service_name)
    return Observability(provider=provider, metrics=serve_metrics(metrics_port))
