"""Span links of a run's attempt: to the run's ingest trace and to the previous attempt.

An attempt's ``run`` span is a child of the delivery that brought it (``consume RunCreated``,
itself in the ingest trace) only for a first attempt delivered by the stream with a sampled
context. Any other attempt (a retry, a run requeued by the reaper or released at shutdown, a
run taken by polling) starts a trace of its own, so that a retry does not stretch one trace
over minutes and does not hang under the trace of the loop that requeued it (sampled at
``AWOOOP_LOOP_TRACE_SAMPLE_RATIO``). Such a ``run`` span links to:

- the **ingest**: the span named by the ``RunCreated`` event's ``traceparent`` (metadata);
- the **previous attempt**: that attempt's ``run`` span, named by the ``run_span`` metadata
  of the events it wrote. An attempt stores it only while its ``run`` span is exported
  (recorded and sampled: :func:`exported_traceparent`);
- what **resumed** it from a durable wait: the span named by the ``traceparent`` of the
  ``TimerFired`` or ``SignalDelivered`` just before this attempt's claim (the ``timers`` loop's
  ``timers fire`` / ``signals deliver`` span, or the signal route's ``signal`` span).

A link names only a sampled span (:func:`awooop.core.telemetry.span_link`): an attempt whose
``run`` span was not exported (not sampled, or in a process that exports nothing), or that
wrote nothing after its claim, gets no previous-attempt link rather than one to a span no
backend has. Both are read from the event log, durable and already written: one indexed read
of the run's stream, made only for such a root span and only while spans are exported, so the
hot path (a first attempt from the stream) pays nothing. From any attempt, Tempo follows the
links back to the previous one and to the ingest.
"""

from __future__ import annotations

import uuid
from typing import Any

from opentelemetry import trace

from awooop.core.events import run_stream_id
from awooop.core.telemetry import inject, span_link

# --- SQL -----------------------------------------------------------------------------------
HISTORY = """
SELECT
  (SELECT metadata FROM awooop_events WHERE stream_id = $1 AND version = 1) AS created,
  (SELECT metadata->>'run_span' FROM awooop_events
   WHERE stream_id = $1 AND metadata ? 'run_span' AND data->>'attempt' = $2
   ORDER BY version DESC LIMIT 1) AS previous,
  (SELECT r.metadata FROM awooop_events c
   JOIN awooop_events r ON r.stream_id = c.stream_id AND r.version = c.version - 1
   WHERE c.stream_id = $1 AND c.event_type = 'RunClaimed' AND c.data->>'attempt' = $3
     AND r.event_type IN ('TimerFired', 'SignalDelivered')
   ORDER BY c.version DESC LIMIT 1) AS resumed
"""


def exported_traceparent(span: trace.Span) -> str | None:
    """The ``traceparent`` naming ``span`` if it is exported (recorded and sampled), else None."""
    if not (span.is_recording() and span.get_span_context().trace_flags.sampled):
        return None
    return inject(trace.set_span_in_context(span))[0]


def links_from(created: Any, previous: Any, resumed: Any = None) -> list[trace.Link]:
    """Pure: the links named by the ``RunCreated`` event's metadata, by the previous
    attempt's ``run_span`` and by the metadata of the event that resumed the run (any may be
    missing, or name a span that was not sampled)."""
    meta = created if isinstance(created, dict) else {}
    woke = resumed if isinstance(resumed, dict) else {}
    named = (
        (meta.get("traceparent"), meta.get("tracestate"), "ingest"),
        (previous, None, "previous_attempt"),
        (woke.get("traceparent"), woke.get("tracestate"), "resumed_by"),
    )
    links: list[trace.Link] = []
    for traceparent, tracestate, kind in named:
        for link in span_link(
            traceparent if isinstance(traceparent, str) else None,
            tracestate if isinstance(tracestate, str) else None,
        ):
            links.append(trace.Link(link.context, {"awooop.link": kind}))
    return links


async def history_links(conn: Any, run_id: uuid.UUID, attempt: int) -> list[trace.Link]:
    """The links of attempt number ``attempt`` of ``run_id`` (see the module docstring)."""
    row = await conn.fetchrow(HISTORY, run_stream_id(run_id), str(attempt - 1), str(attempt))
    if row is None:
        return []
    return links_from(row["created"], row["previous"], row["resumed"])
