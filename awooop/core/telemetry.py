"""Tracing and the metrics endpoint (R-50, R-51).

Tracing is configured by the standard OpenTelemetry environment variables
(``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_TRACES_SAMPLER``, ``OTEL_SDK_DISABLED`` ...) with the OTLP http/protobuf exporter, which
Grafana Tempo accepts on port 4318. Without an endpoint configured (and no processor added),
spans carry ids and the sampling flag but record nothing: trace ids reach the logs and the
envelopes, and a recorded span's cost (attributes, processor calls) is not paid on every span
of every run.

Trace context travels in stream envelopes as W3C ``traceparent``/``tracestate``:
:func:`inject` reads the current span's context, :func:`extract` turns it back into a parent.

Resources carry ``service.name``, ``service.version`` (the installed package's version),
``service.instance.id`` (one per process start) and ``host.name``; ``OTEL_RESOURCE_ATTRIBUTES``
adds or overrides.

**Loop iterations are sampled on their own** and failed iterations are always kept
(:mod:`awooop.core.loop_sampling`, installed here in every provider). Context propagated from
an unsampled iteration (events it writes) carries the not-sampled flag: a run requeued by the
reaper is traced from its next attempt's own root span (see ``awooop.worker.executor``), not as
part of the reaper's trace.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import (
    HOST_NAME,
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    SERVICE_VERSION,
    Resource,
)
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes
from prometheus_client import start_http_server

from awooop.core.loop_sampling import KeepFailedLoops, LoopSampler, loop_ratio_from_env
from awooop.core.spans import SpanStarter, Tracer

_propagator = TraceContextTextMapPropagator()
_configured: TracerProvider | None = None

INSTANCE_ID = str(uuid.uuid4())  # service.instance.id: this process start


class _QuietTracer(SpanStarter):
    """The SDK tracer while something exports; otherwise spans that carry ids and the sampling
    flag the configured sampler gives, without recording anything: trace ids still reach the
    logs and travel in envelopes (a downstream process that exports keeps the trace), at a
    fraction of a recorded span's cost (attributes, limits, processor calls on every span of
    every run)."""

    def __init__(self, recording: trace.Tracer, provider: _Provider) -> None:
        self._recording = recording
        self._provider = provider
        self._sampler = provider.sampler
        self._ids = provider.id_generator

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        if self._provider.exports:
            return self._recording.start_span(
                name,
                context,
                kind,
                attributes,
                links,
                start_time,
                record_exception,
                set_status_on_exception,
            )
        parent = trace.get_current_span(context).get_span_context()
        if parent.is_valid:
            trace_id, random_id = parent.trace_id, parent.trace_flags.random_trace_id
        else:
            trace_id, random_id = self._ids.generate_trace_id(), self._ids.is_trace_id_random()
        result = self._sampler.should_sample(context, trace_id, name, kind, attributes, links)
        flags = (
            TraceFlags.SAMPLED
            if result.decision is sampling.Decision.RECORD_AND_SAMPLE
            else TraceFlags.DEFAULT
        )
        if random_id:
            flags |= TraceFlags.RANDOM_TRACE_ID
        return trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id,
                self._ids.generate_span_id(),
                is_remote=False,
                trace_flags=TraceFlags(flags),
                trace_state=result.trace_state,
            )
        )


tracer = Tracer("awooop")


class _Provider(TracerProvider):
    """The SDK provider whose tracers are quiet while nothing exports (:class:`_QuietTracer`):
    it exports from the first span processor added (an OTLP exporter, a test's in-memory one)."""

    exports = False

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        super().add_span_processor(span_processor)
        self.exports = True

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        recording = super().get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )
        if isinstance(recording, trace.NoOpTracer):  # OTEL_SDK_DISABLED: no ids either
            return recording
        return _QuietTracer(recording, self)


def package_version() -> str:
    """The installed awooop's version (``unknown`` for a source tree run without an install)."""
    try:
        return importlib.metadata.version("awooop")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def resource(service_name: str) -> Resource:
    """The process's resource: service name/version/instance and host (module docstring)."""
    return Resource.create(
        {
            SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", service_name),
            SERVICE_VERSION: package_version(),
            SERVICE_INSTANCE_ID: INSTANCE_ID,
            HOST_NAME: socket.gethostname(),
        }
    )


def build_tracer_provider(
    service_name: str, extra_processors: list[SpanProcessor] | None = None
) -> TracerProvider:
    """A tracer provider configured from the ``OTEL_*`` environment, not yet installed.

    With an OTLP endpoint configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) spans are batched to the OTLP http/protobuf
    exporter; the exporter itself reads the rest of its settings (headers, timeout,
    compression, certificates) from the standard variables.
    """
    sampler = LoopSampler(sampling._get_from_env_or_default(), loop_ratio_from_env())
    provider = _Provider(resource=resource(service_name), sampler=sampler)
    if _otlp_configured():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(KeepFailedLoops(BatchSpanProcessor(OTLPSpanExporter())))
    for processor in extra_processors or []:
        provider.add_span_processor(KeepFailedLoops(processor))
    return provider


def set_loop_sample_ratio(ratio: float) -> float:
    """Change the installed provider's loop ratio (tests); returns the previous one."""
    assert _configured is not None and isinstance(_configured.sampler, LoopSampler)
    previous = _configured.sampler.ratio
    _configured.sampler.set_ratio(ratio)
    return previous


def configure_tracing(
    service_name: str, extra_processors: list[SpanProcessor] | None = None
) -> TracerProvider:
    """Install the SDK tracer provider once per process; later calls return the first one
    (adding ``extra_processors`` to it)."""
    global _configured  # one provider per process, as the OTel API demands
    if _configured is not None:
        for processor in extra_processors or []:
            _configured.add_span_processor(KeepFailedLoops(processor))
        return _configured
    provider = build_tracer_provider(service_name, extra_processors)
    trace.set_tracer_provider(provider)
    _configured = provider
    return provider


def exporting() -> bool:
    """Whether spans leave this process (an OTLP endpoint or an added processor): spans made
    only for a trace view, many per batch, are skipped when nobody would see them."""
    return isinstance(_configured, _Provider) and _configured.exports


_NO_SPAN: AbstractContextManager[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)


def child_span(name: str, attributes: Attributes = None) -> AbstractContextManager[trace.Span]:
    """A child of the current span made for a trace view only (a step, a model call, its
    pointer check): while nothing exports (:func:`exporting`), none is made and the span
    yielded records nothing; the events written inside carry the enclosing span's context."""
    if not exporting():
        return _NO_SPAN
    return tracer.start_as_current_span(name, attributes=attributes)


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


def context_metadata(context: Context | None = None) -> dict[str, str]:
    """The event metadata naming the current (or given) span: ``traceparent`` and
    ``tracestate`` where there are any."""
    traceparent, tracestate = inject(context)
    named = (("traceparent", traceparent), ("tracestate", tracestate))
    return {key: value for key, value in named if value}


def extract(traceparent: str | None, tracestate: str | None = None) -> Context:
    carrier = {}
    if traceparent:
        carrier["traceparent"] = traceparent
        if tracestate:
            carrier["tracestate"] = tracestate
    return _propagator.extract(carrier)


def span_link(traceparent: str | None, tracestate: str | None = None) -> list[trace.Link]:
    """A link to the span named by ``traceparent`` (for redeliveries), or none: none either
    when that span was not sampled (it was never exported, and a link to it leads nowhere)."""
    span_context = trace.get_current_span(extract(traceparent, tracestate)).get_span_context()
    if not (span_context.is_valid and span_context.trace_flags.sampled):
        return []
    return [trace.Link(span_context)]


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
