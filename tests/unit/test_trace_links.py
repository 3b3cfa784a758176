"""A run span links only to spans that were exported: the ingest span and the previous
attempt's ``run`` span when sampled, none otherwise (awooop.worker.tracelinks)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider, sampling

from awooop.core.loop_sampling import LOOP_ATTRIBUTE, LoopSampler
from awooop.core.telemetry import span_link
from awooop.worker.tracelinks import exported_traceparent, links_from

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SAMPLED_INGEST = f"00-{TRACE}-00f067aa0ba902b7-01"
UNSAMPLED_INGEST = f"00-{TRACE}-00f067aa0ba902b7-00"
SAMPLED_RUN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED_RUN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def named(links: list[trace.Link]) -> list[tuple[str, str]]:
    return [
        (str((link.attributes or {})["awooop.link"]), format(link.context.span_id, "016x"))
        for link in links
    ]


def test_sampled_spans_are_linked_with_their_kind() -> None:
    links = links_from({"traceparent": SAMPLED_INGEST}, SAMPLED_RUN)
    assert named(links) == [
        ("ingest", "00f067aa0ba902b7"),
        ("previous_attempt", "b7ad6b7169203331"),
    ]


def test_a_span_that_was_not_sampled_is_not_linked() -> None:
    assert links_from({"traceparent": UNSAMPLED_INGEST}, UNSAMPLED_RUN) == []
    assert named(links_from({"traceparent": UNSAMPLED_INGEST}, SAMPLED_RUN)) == [
        ("previous_attempt", "b7ad6b7169203331")
    ]
    assert span_link(UNSAMPLED_INGEST) == []


def test_missing_or_malformed_context_gives_no_link() -> None:
    assert links_from(None, None) == []
    assert links_from({"traceparent": 7}, "not a traceparent") == []
    assert named(links_from({}, SAMPLED_RUN)) == [("previous_attempt", "b7ad6b7169203331")]


def test_only_a_recorded_and_sampled_run_span_is_stored_for_the_next_attempt() -> None:
    # a loop sampler at ratio 0: a loop-marked root span records but is not sampled
    tracer = TracerProvider(sampler=LoopSampler(sampling.ALWAYS_ON, 0.0)).get_tracer("t")
    with tracer.start_as_current_span("run", context=Context()) as exported:
        stored = exported_traceparent(exported)
        context = exported.get_span_context()
        assert stored is not None
        assert stored.startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
        assert [link.context.span_id for link in span_link(stored)] == [context.span_id]
    with tracer.start_as_current_span(
        "run", context=Context(), attributes={LOOP_ATTRIBUTE: "x"}
    ) as record_only:
        assert record_only.is_recording()
        assert exported_traceparent(record_only) is None
    sampled_but_not_recorded = trace.NonRecordingSpan(
        trace.SpanContext(int(TRACE, 16), 1, is_remote=False, trace_flags=trace.TraceFlags.SAMPLED)
    )
    assert exported_traceparent(sampled_but_not_recorded) is None


def test_the_event_that_resumed_a_run_is_linked_when_sampled() -> None:
    resumed = {"traceparent": SAMPLED_RUN, "actor": "ops"}
    assert named(links_from({"traceparent": SAMPLED_INGEST}, None, resumed)) == [
        ("ingest", "00f067aa0ba902b7"),
        ("resumed_by", "b7ad6b7169203331"),
    ]
    assert links_from(None, None, {"traceparent": UNSAMPLED_RUN}) == []
    assert links_from(None, None, {"actor": "ops"}) == []  # written without a span
