"""The span of one stream delivery (R-50): the consumer continues the producer's trace.

The relay copies the producer's ``traceparent``/``tracestate`` (from the event metadata) into
the envelope. A first delivery is a child of the producer's span; a redelivery (reclaimed,
``delivery_count > 1``) starts a new trace linked to it, so that a retry does not stretch the
original trace over minutes. Re-exported by :mod:`streams.consumer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context

from awooop.context import bound
from awooop.events import run_id_of_stream
from awooop.telemetry import extract, span_link, tracer
from streams.delivery import Delivery


@contextmanager
def consume_span(delivery: Delivery) -> Iterator[trace.Span]:
    """The span of one delivery, with project/run/trace in the log context.

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
    with tracer.start_as_current_span(
        f"consume {env.event_type}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    ) as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
        with bound(
            project_id=env.project_id,
            run_id=str(run_id) if run_id else None,
            trace_id=trace_id,
        ):
            yield span
