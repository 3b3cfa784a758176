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
    return Bound(project_id, run_id, trace_id)


_VARS = (project_id_var, run_id_var, trace_id_var)


class Bound:
    """:func:`bound`'s block: a small object, not a generator (every run in flight is in one
    while it runs). A value that is None, or already in place (a delivery's block around its
    attempt's), is not set: each set is a token and a new context mapping, held for as long as
    the block lasts."""

    __slots__ = ("_project", "_project_token", "_run", "_run_token", "_trace", "_trace_token")

    def __init__(self, project_id: str | None, run_id: str | None, trace_id: str | None) -> None:
        self._project, self._run, self._trace = project_id, run_id, trace_id
        self._project_token: Token[str | None] | None = None
        self._run_token: Token[str | None] | None = None
        self._trace_token: Token[str | None] | None = None

    def __enter__(self) -> None:
        self._project_token = _set(project_id_var, self._project)
        self._run_token = _set(run_id_var, self._run)
        self._trace_token = _set(trace_id_var, self._trace)

    def __exit__(self, *_exc: object) -> None:
        tokens = (self._project_token, self._run_token, self._trace_token)
        for var, token in reversed(tuple(zip(_VARS, tokens, strict=True))):
            if token is not None:
                var.reset(token)
        self._project_token = self._run_token = self._trace_token = None

    def set_here(self) -> tuple[ContextVar[str | None], ...]:
        """The variables this block set when it was entered (none before)."""
        tokens = (self._project_token, self._run_token, self._trace_token)
        return tuple(var for var, token in zip(_VARS, tokens, strict=True) if token is not None)


def _set(var: ContextVar[str | None], value: str | None) -> Token[str | None] | None:
    return None if value is None or var.get() == value else var.set(value)
