"""structlog JSON logging shared by every process (R-52).

Every line carries ``project_id``, ``run_id`` and ``trace_id`` from context: the trace id of
the active OpenTelemetry span when there is one, else the one bound in :mod:`awooop.context`.
Tests use ``structlog.testing.capture_logs`` rather than parsing output.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

from awooop.context import project_id_var, run_id_var, trace_id_var


def add_context(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event_dict.setdefault("project_id", project_id_var.get())
    event_dict.setdefault("run_id", run_id_var.get())
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        event_dict.setdefault("trace_id", format(span_context.trace_id, "032x"))
        event_dict.setdefault("span_id", format(span_context.span_id, "016x"))
    else:
        event_dict.setdefault("trace_id", trace_id_var.get())
    return event_dict


def configure_logging(level: str = "info", stream: Any = None) -> None:
    logging.basicConfig(
        format="%(message)s", stream=stream or sys.stderr, level=level.upper(), force=True
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
