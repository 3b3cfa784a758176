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
from typing import Any

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


def configure_tracing(
    service_name: str, extra_processors: list[SpanProcessor] | None = None
) -> TracerProvider:
    """Install the SDK tracer provider once per process; later calls return the first one."""
    global _configured  # one provider per process, as the OTel API demands
    if _configured is not None:
        for processor in extra_processors or []:
            _configured.add_span_processor(processor)
        return _configured
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    if _otlp_configured():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    for processor in extra_processors or []:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _configured = provider
    return provider


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


def serve_metrics(port: int, addr: str = "0.0.0.0") -> Any:  # noqa: S104 - scraped from outside
    """Serve the default Prometheus registry on ``port`` (0: do nothing)."""
    if port <= 0:
        return None
    return start_http_server(port, addr=addr)
