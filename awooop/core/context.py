"""Request and loop context carried in context variables: project, run and trace (R-41, R-52).

Log lines (:mod:`awooop.core.logs`) and spans read these; tenant transactions take the project from
the caller explicitly, never implicitly from here, so a missing context cannot widen access.
"""

from __future__ import annotations

import secrets
from contextvars import ContextVar, Token

# The project of the platform's own work (platform loops, admin tokens, undecodable dead
# letters): a name no tenant can take (project ids are checked against a pattern without it).
PLATFORM_PROJECT = "__platform__"

project_id_var: ContextVar[str | None] = ContextVar("awooop_project_id", default=None)
run_id_var: ContextVar[str | None] = ContextVar("awooop_run_id", default=None)
trace_id_var: ContextVar[str | None] = ContextVar("awooop_trace_id", default=None)


def new_trace_id() -> str:
    """A W3C trace id (32 lowercase hex digits, not all zero)."""
    return secrets.token_hex(16)


def bound(
    *, project_id: str | None = None, run_id: str | None = None, trace_id: str | None = None
) -> Bound:
    """Set the given context values for the duration of the block (``with bound(...):``)."""
    values = ((project_id_var, project_id), (run_id_var, run_id), (trace_id_var, trace_id))
    return Bound(tuple((var, value) for var, value in values if value is not None))


class Bound:
    """:func:`bound`'s block: a small object, not a generator (every run in flight is in one
    while it runs)."""

    __slots__ = ("_tokens", "_values")

    def __init__(self, values: tuple[tuple[ContextVar[str | None], str], ...]) -> None:
        self._values = values
        self._tokens: tuple[tuple[ContextVar[str | None], Token[str | None]], ...] = ()

    def __enter__(self) -> None:
        # A value already in place (a delivery's block around its attempt's) is not set again:
        # each set is a token and a new context mapping held for as long as the block lasts.
        self._tokens = tuple(
            (var, var.set(value)) for var, value in self._values if var.get() != value
        )

    def __exit__(self, *_exc: object) -> None:
        for var, token in reversed(self._tokens):
            var.reset(token)
