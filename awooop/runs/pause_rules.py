"""Pauses as pure decisions: which scope a command names, how a pause reads, what resumes it.

A pause stops new attempts of a whole project, of one of its channels (the runs whose
``channel_type`` is the channel) or of one of its contracts (``contract_id``). The claim
statements enforce it (``awooop/eventlog/sql/_run_paused.sql``); :mod:`awooop.runs.pauses`
stores it. Everything here is pure, for the CLI, the routes and ``blocked_on``.
"""

from __future__ import annotations

import enum
from datetime import datetime

import msgspec

from awooop.core.errors import InvalidInputError

MAX_KEY = 200
MAX_REASON = 2000
MAX_ACTOR = 200


class Scope(enum.StrEnum):
    PROJECT = "project"
    CHANNEL = "channel"
    CONTRACT = "contract"


class Pause(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``awooop_flow_pauses``: active while ``resumed_at`` is None."""

    pause_id: str
    project_id: str
    scope: Scope
    scope_key: str
    reason: str
    paused_by: str
    paused_at: datetime
    resumed_by: str | None = None
    resumed_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.resumed_at is None


def scope_of(channel: str | None = None, contract: str | None = None) -> tuple[Scope, str]:
    """Pure: the scope a command names: a channel, a contract, or (neither) the project."""
    if channel is not None and contract is not None:
        raise InvalidInputError("name a channel or a contract, not both")
    for kind, key in ((Scope.CHANNEL, channel), (Scope.CONTRACT, contract)):
        if key is not None:
            if not key or len(key) > MAX_KEY:
                raise InvalidInputError(f"{kind.value} must be 1-{MAX_KEY} characters")
            return kind, key
    return Scope.PROJECT, ""


def check_text(name: str, value: str, limit: int, *, empty: bool = True) -> str:
    if len(value) > limit or (not empty and not value):
        raise InvalidInputError(f"{name} must be {0 if empty else 1}-{limit} characters")
    return value


def describe_scope(scope: Scope, key: str) -> str:
    """Pure: ``project``, ``channel alertmanager``, ``contract triage``."""
    return scope.value if scope is Scope.PROJECT else f"{scope.value} {key}"


def resume_command(project_id: str, scope: Scope, key: str) -> str:
    """Pure: the command that lifts this pause."""
    option = "" if scope is Scope.PROJECT else f" --{scope.value} {key}"
    return f"awooop projects resume {project_id}{option}"


def holds(pause: Pause, channel_type: str, contract_id: str | None) -> bool:
    """Pure: whether an active ``pause`` of the run's project holds a run of this channel and
    contract: the rule of ``_run_paused.sql`` in words (tests hold the two equal)."""
    if not pause.active:
        return False
    if pause.scope is Scope.PROJECT:
        return True
    if pause.scope is Scope.CHANNEL:
        return pause.scope_key == channel_type
    return contract_id is not None and pause.scope_key == contract_id
