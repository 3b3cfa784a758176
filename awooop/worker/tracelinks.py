"""Span links of a run's attempt: to the run's ingest trace and to the previous attempt.

An attempt's ``run`` span is a child of the delivery that brought it (``consume RunCreated``,
itself in the ingest trace) only for a first attempt delivered by the stream with a sampled
context. Any other attempt (a retry, a run requeued by the reaper or released at shutdown, a
run taken by polling) starts a trace of its own, so that a retry does not stretch one trace
over minutes and does not hang under the trace of the loop that requeued it (sampled at
``AWOOOP_LOOP_TRACE_SAMPLE_RATIO``). Such a ``run`` span links to:

- the **ingest**: the span named by the ``RunCreated`` event's ``traceparent`` (metadata);
- the **previous attempt**: the span named by the ``traceparent`` of the last event that
  attempt wrote (a step, ``RunFailed``, ``LeaseReleased``: written inside its ``run`` span;
  ``RunClaimed`` when it wrote nothing else, which names its ``lease claim`` span).

Both are read from the event log, durable and already written: one indexed read of the run's
stream, made only for such a root span and only while spans are exported, so the hot path (a
first attempt from the stream) pays nothing. From any attempt, Tempo follows the links back
to the previous one and to the ingest.
"""

from __future__ import annotations

import uuid
from typing import Any

from opentelemetry import trace

from awooop.core.events import run_stream_id
from awooop.core.telemetry import span_link

# --- SQL -----------------------------------------------------------------------------------
HISTORY = """
SELECT
  (SELECT metadata FROM awooop_events WHERE stream_id = $1 AND version = 1) AS created,
  (SELECT metadata FROM awooop_events
   WHERE stream_id = $1 AND metadata ? 'traceparent'
     AND event_type NOT IN ('RunCreated', 'RunRequeued')
     AND data->>'attempt' = $2
   ORDER BY version DESC LIMIT 1) AS previous
"""


def links_from(created: Any, previous: Any) -> list[trace.Link]:
    """Pure: the links named by the metadata of the ``RunCreated`` event and of the previous
    attempt's last event (either may be missing or carry no trace context)."""
    links: list[trace.Link] = []
    for meta, kind in ((created, "ingest"), (previous, "previous_attempt")):
        if not isinstance(meta, dict):
            continue
        traceparent, tracestate = meta.get("traceparent"), meta.get("tracestate")
        for link in span_link(
            traceparent if isinstance(traceparent, str) else None,
            tracestate if isinstance(tracestate, str) else None,
        ):
            links.append(trace.Link(link.context, {"awooop.link": kind}))
    return links


async def history_links(conn: Any, run_id: uuid.UUID, attempt: int) -> list[trace.Link]:
    """The links of attempt number ``attempt`` of ``run_id`` (see the module docstring)."""
    row = await conn.fetchrow(HISTORY, run_stream_id(run_id), str(attempt - 1))
    if row is None:
        return []
    return links_from(row["created"], row["previous"])
