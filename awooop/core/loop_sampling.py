"""Loop iterations are sampled on their own, and their failures always kept.

A background loop iteration is a root span of its own trace, several a second per process:
:class:`LoopSampler` keeps them at ``AWOOOP_LOOP_TRACE_SAMPLE_RATIO`` (default 0.01) so they do
not drown the traces people look for (webhooks, runs), and defers every other span to the
configured ``OTEL_TRACES_SAMPLER``. A span's status is known only when it ends, after the
sampling decision, so an iteration not picked by the ratio is still *recorded* (not sampled):
:class:`KeepFailedLoops`, in front of every exporting processor, passes its spans on, marked
sampled, only if the iteration's root span ended with an error. :mod:`awooop.core.telemetry`
installs both.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, sampling
from opentelemetry.trace import SpanKind, TraceFlags
from opentelemetry.util.types import Attributes

LOOP_RATIO_ENV = "AWOOOP_LOOP_TRACE_SAMPLE_RATIO"
DEFAULT_LOOP_RATIO = 0.01
# Set on every loop iteration's root span (awooop.core.loops) and on each projector batch's
# (awooop.projections.runner: a batch is a piece of its loop's work, sampled as one).
LOOP_ATTRIBUTE = "awooop.loop"


def loop_ratio_from_env() -> float:
    """``AWOOOP_LOOP_TRACE_SAMPLE_RATIO`` as a ratio in [0, 1] (default 0.01)."""
    raw = os.environ.get(LOOP_RATIO_ENV, "").strip()
    if not raw:
        return DEFAULT_LOOP_RATIO
    try:
        ratio = float(raw)
    except ValueError:
        raise ValueError(f"{LOOP_RATIO_ENV} must be a number in [0, 1], not {raw!r}") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{LOOP_RATIO_ENV} must be in [0, 1], not {ratio}")
    return ratio


class LoopSampler(sampling.Sampler):
    """The configured sampler, except for loop iterations (see the module docstring).

    - a root span with the ``awooop.loop`` attribute: sampled with probability ``ratio`` (by
      trace id), else RECORD_ONLY (kept in process in case it fails);
    - a child of a local span that records but is not sampled (inside such an iteration):
      RECORD_ONLY as well;
    - anything else: ``delegate`` (``OTEL_TRACES_SAMPLER``, parent-based always-on by default).
    """

    def __init__(self, delegate: sampling.Sampler, ratio: float) -> None:
        self.delegate = delegate
        self.set_ratio(ratio)

    def set_ratio(self, ratio: float) -> None:
        self.ratio = ratio
        self._by_ratio = sampling.TraceIdRatioBased(ratio)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> sampling.SamplingResult:
        parent = trace.get_current_span(parent_context)
        parent_context_ = parent.get_span_context()
        if not parent_context_.is_valid:
            if attributes and LOOP_ATTRIBUTE in attributes:
                result = self._by_ratio.should_sample(
                    parent_context, trace_id, name, kind, attributes, links, trace_state
                )
                if result.decision is sampling.Decision.DROP:
                    return sampling.SamplingResult(sampling.Decision.RECORD_ONLY, attributes)
                return result
        elif (
            not parent_context_.trace_flags.sampled
            and not parent_context_.is_remote
            and parent.is_recording()
        ):
            return sampling.SamplingResult(sampling.Decision.RECORD_ONLY, attributes)
        return self.delegate.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"LoopSampler{{loops={self.ratio}, else={self.delegate.get_description()}}}"


class KeepFailedLoops(SpanProcessor):
    """In front of an exporting processor: sampled spans pass; the spans of a recorded but
    unsampled trace (a loop iteration not picked by the ratio) are held until its root span
    ends and passed on, marked sampled, only when that root ended with an error. At most
    ``MAX_HELD`` spans are held per iteration."""

    MAX_HELD = 512

    def __init__(self, delegate: SpanProcessor) -> None:
        self.delegate = delegate
        self._held: dict[int, list[ReadableSpan]] = {}
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.delegate.on_start(span, parent_context=parent_context)
        context = span.get_span_context()
        if not context.trace_flags.sampled and span.parent is None:
            with self._lock:
                self._held[context.trace_id] = []

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or context.trace_flags.sampled:
            self.delegate.on_end(span)
            return
        with self._lock:
            held = self._held.get(context.trace_id)
            if held is None:
                return  # not an iteration we hold (or its root already ended): dropped
            if span.parent is not None:
                if len(held) < self.MAX_HELD:
                    held.append(span)
                return
            del self._held[context.trace_id]
        if span.status.status_code is trace.StatusCode.ERROR:
            for kept in [*held, span]:
                self.delegate.on_end(_marked_sampled(kept))

    def shutdown(self) -> None:
        self.delegate.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.delegate.force_flush(timeout_millis)


def _marked_sampled(span: ReadableSpan) -> ReadableSpan:
    """A copy of ``span`` whose context has the sampled flag (exporters skip spans without)."""
    context = span.context
    assert context is not None
    return ReadableSpan(
        name=span.name,
        context=trace.SpanContext(
            context.trace_id,
            context.span_id,
            is_remote=False,
            trace_flags=TraceFlags(context.trace_flags | TraceFlags.SAMPLED),
            trace_state=context.trace_state,
        ),
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
