"""What ``run.wait_for_approval`` records and returns: the decision of an approval as a step.

The first attempt after an approval finds the decision (:func:`awooop.runs.approvals.
find_decision`) and journals it as the step ``approval:<name>``: :func:`recorded` is that
step's result, ``actor``, ``decided_at`` (ISO 8601) and ``by`` when a person decided without
the token. A later attempt replays the step: :func:`replayed` reads the same fields back, so
the handler gets the same grant either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


class Decision(Protocol):
    """A decision's fields: a :class:`~awooop.runs.approvals.DecisionRecord` or a grant."""

    @property
    def actor(self) -> str | None: ...
    @property
    def decided_at(self) -> datetime | None: ...
    @property
    def by(self) -> str | None: ...


@dataclass(frozen=True)
class Decided:
    """Who decided and when (the fields of ``ApprovalGrant`` besides its name)."""

    actor: str | None
    decided_at: datetime | None
    by: str | None = None


def recorded(found: Decision) -> dict[str, Any]:
    """The step result journaled for an approval that was granted."""
    when = found.decided_at
    grant: dict[str, Any] = {"actor": found.actor, "decided_at": when and when.isoformat()}
    if found.by is not None:
        grant["by"] = found.by
    return grant


def replayed(result: Any) -> Decided:
    """The decision from a journaled ``approval:<name>`` step result (a step recorded without
    a field gives None for it)."""
    fields: dict[str, Any] = result if isinstance(result, dict) else {}
    when = fields.get("decided_at")
    return Decided(
        actor=_text(fields.get("actor")),
        decided_at=datetime.fromisoformat(when) if isinstance(when, str) else None,
        by=_text(fields.get("by")),
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
