"""Spans of the stream hops (R-50): one trace from the producer through the relay to the
consumer.

- The relay opens a ``publish <EventType>`` span per event in the event's own trace (a child
  of the producer span named by the event metadata's ``traceparent``), only for sampled
  traces and only when spans are exported, and puts that span's context into the envelope
  (:func:`publish_spans`); otherwise the envelope carries the producer's context.
- A first delivery is a child of the span the envelope names; a redelivery (reclaimed,
  ``delivery_count > 1``) starts a new trace linked to it, so that a retry does not stretch
  the original trace over minutes. Used by :mod:`awooop.streams.consumer` and
  :mod:`awooop.worker.streaming`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context

from awooop.core.context import Bound, bound
from awooop.core.events import run_id_of_stream
from awooop.core.spans import CurrentSpan
from awooop.core.telemetry import exporting, extract, inject, span_link, tracer
from awooop.eventlog.eventlog import RecordedEvent
from awooop.streams.delivery import Delivery
from awooop.streams.keys import Keys


def consume_span(delivery: Delivery) -> ConsumeSpan:
    """The span of one delivery, with project/run/trace in the log context (``with``).

    First delivery: a child of the producer span named by the envelope's traceparent.
    Redelivery (delivery_count > 1): a new trace, linked to the producer span.
    """
    env = delivery.envelope
    attributes: dict[str, str | int] = {
        "messaging.system": "redis",
        "messaging.operation": "process",
        "messaging.destination.name": delivery.stream,
        "messaging.consumer.group.name": delivery.group,
        "messaging.message.id": delivery.entry_id,
        "awooop.event_id": str(env.event_id),
        "awooop.stream_id": env.stream_id,
        "awooop.version": env.version,
        "awooop.project_id": env.project_id,
        "awooop.delivery_count": delivery.delivery_count,
    }
    if delivery.delivery_count <= 1:
        parent, links = extract(env.traceparent, env.tracestate), None
    else:
        parent, links = Context(), span_link(env.traceparent, env.tracestate)
    run_id = run_id_of_stream(env.stream_id)
    current = tracer.start_as_current_span(
        f"consume {env.event_type}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    )
    logged = bound(
        project_id=env.project_id,
        run_id=str(run_id) if run_id else None,
        trace_id=format(current.span.get_span_context().trace_id, "032x"),
    )
    return ConsumeSpan(current, logged)


class ConsumeSpan:
    """:func:`consume_span`'s block: its span current, then the log context bound; one small
    object (a delivery's handler may run as long as its run does)."""

    __slots__ = ("_current", "_logged")

    def __init__(self, current: CurrentSpan, logged: Bound) -> None:
        self._current = current
        self._logged = logged

    def __enter__(self) -> trace.Span:
        span = self._current.__enter__()
        try:
            self._logged.__enter__()
        except BaseException as exc:
            self._current.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return span

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            self._logged.__exit__(kind, exc, tb)
        finally:
            self._current.__exit__(kind, exc, tb)


class PublishSpans:
    """The relay's spans of one batch, one per sampled event, ended once it is published."""

    def __init__(self) -> None:
        self.spans: list[trace.Span] = []
        self.contexts: dict[uuid.UUID, tuple[str | None, str | None]] = {}

    def end(self, error: BaseException | None = None) -> None:
        for span in self.spans:
            if error is not None:
                span.record_exception(error)
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
            span.end()
        self.spans.clear()


def sampled(traceparent: object) -> bool:
    """Pure: whether a W3C ``traceparent`` has the sampled flag (a span there is exported)."""
    if not isinstance(traceparent, str) or len(traceparent) != 55:
        return False
    try:
        return bool(int(traceparent[53:], 16) & 1)
    except ValueError:
        return False


def publish_spans(batch: Sequence[RecordedEvent], keys: Keys) -> PublishSpans:
    """Start the relay hop's span of every sampled event of ``batch`` in that event's trace;
    ``contexts`` maps event ids to the (traceparent, tracestate) their envelopes carry."""
    spans = PublishSpans()
    if not exporting():
        return spans
    for event in batch:
        meta = event.metadata if isinstance(event.metadata, dict) else {}
        traceparent = meta.get("traceparent")
        if not sampled(traceparent):
            continue
        tracestate = meta.get("tracestate")
        span = tracer.start_span(
            f"publish {event.event_type}",
            context=extract(traceparent, tracestate if isinstance(tracestate, str) else None),
            kind=trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": "redis",
                "messaging.operation": "publish",
                "messaging.destination.name": keys.events_stream(keys.shard_of(event.project_id)),
                "awooop.event_id": str(event.event_id),
                "awooop.stream_id": event.stream_id,
                "awooop.version": event.version,
                "awooop.project_id": event.project_id,
            },
        )
        if not span.is_recording():  # no SDK tracer provider in this process
            continue
        spans.spans.append(span)
        spans.contexts[event.event_id] = inject(trace.set_span_in_context(span))
    return spans
