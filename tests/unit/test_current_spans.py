"""A span made current for a block is one small object (no generator, no instance dict) that
does what the SDK's ``start_as_current_span`` does: current inside, ended after, an error
recorded with its status; the log context of a block is set only where it changes."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from awooop.core import telemetry
from awooop.core.context import bound, project_id_var, run_id_var
from awooop.core.spans import CurrentSpan, Tracer


def recording() -> tuple[trace.Tracer, InMemorySpanExporter]:
    provider = TracerProvider(sampler=sampling.ALWAYS_ON)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("t"), exporter


def test_the_runtime_tracer_makes_a_slotted_current_span() -> None:
    block = telemetry.tracer.start_as_current_span("x", context=Context())
    assert isinstance(block, CurrentSpan)
    assert not hasattr(block, "__dict__")
    before = context_api.get_current()
    with block as span:
        assert context_api.get_current() is not before
        assert trace.get_current_span() is span
    assert context_api.get_current() is before
    assert isinstance(telemetry.tracer, Tracer)


def test_a_quiet_tracer_makes_the_same_current_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    quiet = telemetry.build_tracer_provider("current-test").get_tracer("t")
    block = quiet.start_as_current_span("x", context=Context())
    assert isinstance(block, CurrentSpan)
    with block as span:
        assert trace.get_current_span() is span and not span.is_recording()


def test_an_error_is_recorded_with_its_status_and_the_span_ended() -> None:
    tracer, exporter = recording()
    block = CurrentSpan(tracer.start_span("failing"), True, True, True)
    with pytest.raises(ValueError, match="no"), block:
        raise ValueError("no")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: no"
    assert [e.name for e in span.events] == ["exception"]


def test_a_cancellation_is_no_error_and_the_span_still_ends() -> None:
    tracer, exporter = recording()
    with (
        pytest.raises(asyncio.CancelledError),
        CurrentSpan(tracer.start_span("cancelled"), True, True, True),
    ):
        raise asyncio.CancelledError
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.UNSET and not span.events


def test_without_end_on_exit_the_span_stays_open_and_errors_unrecorded_when_told() -> None:
    tracer, exporter = recording()
    span = tracer.start_span("open")
    with pytest.raises(ValueError, match="kept"), CurrentSpan(span, False, False, False):
        raise ValueError("kept out")
    assert span.is_recording() and not exporter.get_finished_spans()
    span.end()
    (ended,) = exporter.get_finished_spans()
    assert ended.status.status_code is StatusCode.UNSET and not ended.events


def test_a_bound_block_sets_only_what_changes_and_restores_it() -> None:
    with bound(project_id="p", run_id="r"):
        inner = bound(project_id="p", run_id="other")
        with inner:
            assert (project_id_var.get(), run_id_var.get()) == ("p", "other")
            assert inner.set_here() == (run_id_var,)
        assert (project_id_var.get(), run_id_var.get()) == ("p", "r")
    assert (project_id_var.get(), run_id_var.get()) == (None, None)
