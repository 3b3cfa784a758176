"""Spans made current for a block without the OpenTelemetry API's generators.

:class:`CurrentSpan` is what ``with tracer.start_as_current_span(...)`` gives here: the span
current for the block, ended after it, an exception recorded and the status set as the SDK's
tracer does. :class:`Tracer` is the runtime's tracer (``awooop.core.telemetry.tracer``): the
installed provider's spans, each made current by a :class:`CurrentSpan`. The API's own context
managers nest three generators per span (its proxy tracer's, the tracer's and ``use_span``'s),
and every run in flight is inside two spans for as long as it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import Attributes


class CurrentSpan:
    """``with tracer.start_as_current_span(...)``: the span current for the block and ended
    after it, with an exception recorded on it and its status set, what the SDK's tracer does
    (``trace.use_span(span, end_on_exit=True)``), as one small object instead of the API's
    three generator context managers (every run in flight is inside two such blocks, its
    delivery's and its attempt's)."""

    __slots__ = ("_end", "_record", "_status", "_token", "span")

    def __init__(
        self, span: trace.Span, end_on_exit: bool, record_exception: bool, set_status: bool
    ) -> None:
        self.span = span  # started: current from __enter__ on
        self._end = end_on_exit
        self._record = record_exception
        self._status = set_status
        self._token: object = None

    def __enter__(self) -> trace.Span:
        self._token = context_api.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(
        self, _type: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> None:
        try:
            context_api.detach(self._token)  # type: ignore[arg-type] # attach's own token
            # As use_span: Exception only (GeneratorExit, CancelledError are no errors).
            if isinstance(exc, Exception) and self.span.is_recording():
                if self._record:
                    self.span.record_exception(exc)
                if self._status:
                    description = f"{type(exc).__name__}: {exc}"
                    self.span.set_status(Status(StatusCode.ERROR, description))
        finally:
            if self._end:
                self.span.end()


class SpanStarter(trace.Tracer):
    """A tracer whose ``start_as_current_span`` makes the span current with one
    :class:`CurrentSpan` (the API's is three nested generator context managers); subclasses
    say how a span starts (``start_span``)."""

    def start_as_current_span(  # type: ignore[override] # a CurrentSpan, not the API's generator
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> CurrentSpan:
        span = self.start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )
        return CurrentSpan(span, end_on_exit, record_exception, set_status_on_exception)


class Tracer(SpanStarter):
    """The runtime's tracer (``awooop.core.telemetry.tracer``): spans of the installed
    provider (the API's proxy tracer finds it, whenever it is installed), made current by
    :class:`CurrentSpan`."""

    def __init__(self, name: str) -> None:
        self._proxy = trace.get_tracer(name)

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
        return self._proxy.start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )
