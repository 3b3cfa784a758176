"""Capture log lines as dicts, through the processors production uses.

``structlog.testing.capture_logs`` replaces the whole processor chain, so context processors
(:func:`awooop.core.logs.add_context`) do not run inside it. :func:`capture_context_logs` keeps
``awooop.core.logs.CONTEXT_PROCESSORS`` and swaps only the final renderer for a list, so a test
that finds ``trace_id`` or ``project_id`` in a captured line proves production adds them.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog

from awooop.core.logs import CONTEXT_PROCESSORS


@contextmanager
def capture_context_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    captured: list[MutableMapping[str, Any]] = []

    def keep(_logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        event_dict.setdefault("log_level", method)
        captured.append(event_dict)
        raise structlog.DropEvent

    old = structlog.get_config()
    structlog.configure(
        processors=[*CONTEXT_PROCESSORS, keep],
        wrapper_class=structlog.make_filtering_bound_logger(0),
        cache_logger_on_first_use=False,
    )
    try:
        yield captured
    finally:
        structlog.configure(**old)
