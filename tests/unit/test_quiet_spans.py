"""While nothing exports, spans carry ids and the configured sampler's flag but record nothing;
once a processor is added, the same tracer records."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import TraceFlags

from awooop.core import telemetry


def provider(sampler: sampling.Sampler) -> telemetry.TracerProvider:
    built = telemetry.build_tracer_provider("quiet-test")
    built.sampler = sampler  # type: ignore[misc] # the SDK reads it at start_span
    return built


def test_a_quiet_span_has_ids_the_sampler_flag_and_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    quiet = provider(sampling.ALWAYS_ON).get_tracer("t")
    with (
        quiet.start_as_current_span("root", context=Context()) as root,
        quiet.start_as_current_span("child", attributes={"a": 1}) as child,
    ):
        assert telemetry.current_trace_id() == format(root.get_span_context().trace_id, "032x")
    assert not root.is_recording() and not child.is_recording()
    root_ctx, child_ctx = root.get_span_context(), child.get_span_context()
    assert root_ctx.is_valid and child_ctx.is_valid
    assert child_ctx.trace_id == root_ctx.trace_id and child_ctx.span_id != root_ctx.span_id
    assert root_ctx.trace_flags.sampled and child_ctx.trace_flags.sampled
    assert root_ctx.trace_flags & TraceFlags.RANDOM_TRACE_ID  # as the SDK's own spans say
    traceparent, _ = telemetry.inject(trace.set_span_in_context(child))
    assert traceparent is not None and traceparent.endswith("-03")

    dropped = provider(sampling.ALWAYS_OFF).get_tracer("t").start_span("x", context=Context())
    assert dropped.get_span_context().is_valid
    assert not dropped.get_span_context().trace_flags.sampled


def test_a_remote_parent_keeps_its_trace_and_the_span_follows_its_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    quiet = provider(sampling.ParentBased(sampling.ALWAYS_ON)).get_tracer("t")
    for flag in ("01", "00"):
        parent = telemetry.extract(f"00-{'ab' * 16}-{'cd' * 8}-{flag}")
        span = quiet.start_span("consume", context=parent)
        assert span.get_span_context().trace_id == int("ab" * 16, 16)
        assert span.get_span_context().trace_flags.sampled is (flag == "01")


def test_the_same_tracer_records_once_something_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    built = provider(sampling.ALWAYS_ON)
    tracer = built.get_tracer("t")
    with tracer.start_as_current_span("unseen", context=Context()) as span:
        assert not span.is_recording()
    exporter = InMemorySpanExporter()
    built.add_span_processor(SimpleSpanProcessor(exporter))
    with tracer.start_as_current_span("seen", context=Context()) as span:
        assert span.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["seen"]


def test_a_provider_built_with_an_otlp_endpoint_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether spans record is the provider's own fact, not the process's: a provider built
    with an endpoint records even when another (quiet) one is installed."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    built = telemetry.build_tracer_provider("quiet-test")
    span = built.get_tracer("t").start_span("x", context=Context())
    assert span.is_recording()
    built.shutdown()  # the span never ends: nothing is queued for the (absent) endpoint


def test_a_disabled_sdk_hands_out_no_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    span = telemetry.build_tracer_provider("quiet-test").get_tracer("t").start_span("x")
    assert not span.get_span_context().is_valid


def test_a_child_span_is_made_only_while_something_exports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = provider(sampling.ALWAYS_ON)  # no processor yet: nothing exports
    monkeypatch.setattr(telemetry, "_configured", built)
    monkeypatch.setattr(telemetry, "tracer", built.get_tracer("awooop"))
    root = built.get_tracer("t").start_span("root", context=Context())
    assert not telemetry.exporting()
    with trace.use_span(root), telemetry.child_span("step s", {"a": 1}) as child:
        child.set_attribute("b", 2)
        assert trace.get_current_span() is root  # nothing new is current
        assert not child.is_recording() and not child.get_span_context().is_valid
    exporter = InMemorySpanExporter()
    built.add_span_processor(SimpleSpanProcessor(exporter))
    assert telemetry.exporting()
    with trace.use_span(root), telemetry.child_span("step s", {"a": 1}) as child:
        assert child.is_recording() and trace.get_current_span() is child
    assert [s.name for s in exporter.get_finished_spans()] == ["step s"]
