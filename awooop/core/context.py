"""Request and loop context carried in context variables: project, run and trace (R-41, R-52).

Log lines (:mod:`awooop.core.logs`) and spans read these; tenant transactions take the project from
the caller explicitly, never implicitly from here, so a missing context cannot widen access.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# The project of the platform's own work (platform loops, admin tokens, undecodable dead
# letters): a name no tenant can take (project ids are checked against a pattern without it).
PLATFORM_PROJECT = "__platform__"

project_id_var: ContextVar[str | None] = ContextVar("awooop_project_id", default=None)
run_id_var: ContextVar[str | None] = ContextVar("awooop_run_id", default=None)
trace_id_var: ContextVar[str | None] = ContextVar("awooop_trace_id", default=None)


def new_trace_id() -> str:
    """A W3C trace id (32 lowercase hex digits, not all zero)."""
    return secrets.token_hex(16)


@contextmanager
def bound(
    *, project_id: str | None = None, run_id: str | None = None, trace_id: str | None = None
) -> Iterator[None]:
    """Set the given context values for the duration of the block."""
    tokens = []
    for var, value in (
        (project_id_var, project_id),
        (run_id_var, run_id),
        (trace_id_var, trace_id),
    ):
        if value is not None:
            tokens.append((var, var.set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)
