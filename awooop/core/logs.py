"""structlog JSON logging shared by every process (R-52).

Every line carries ``project_id``, ``run_id`` and ``trace_id`` from context: the trace id of
the active OpenTelemetry span when there is one, else the one bound in :mod:`awooop.core.context`.
Lines from the standard ``logging`` module (asyncpg, uvicorn, redis, ...) go through the same
processors, so they are JSON with the same context fields too.

:data:`CONTEXT_PROCESSORS` is the chain every line passes before rendering; tests capture log
lines with that exact chain (``tests/support/logcapture.py``) rather than parsing output, so a
test that sees ``trace_id`` in a captured line proves :func:`add_context` really ran.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from opentelemetry import trace
from structlog.typing import Processor

from awooop.core.context import project_id_var, run_id_var, trace_id_var


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


# Every line, structlog's or the standard library's, passes these before it is rendered.
CONTEXT_PROCESSORS: tuple[Processor, ...] = (
    structlog.contextvars.merge_contextvars,
    add_context,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
)


def configure_logging(level: str = "info", stream: Any = None) -> None:
    out = stream or sys.stderr
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    # Standard-library records: rendered by structlog with the same context processors.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *CONTEXT_PROCESSORS],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric_level)
    structlog.configure(
        processors=[
            *CONTEXT_PROCESSORS,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
