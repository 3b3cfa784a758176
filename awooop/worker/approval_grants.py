"""What ``run.wait_for_approval`` asks, records and returns: the decision of an approval as a
step.

The first attempt after a decision finds it (:func:`awooop.runs.approvals.find_decision`) and
journals it as the step ``approval:<name>``: :func:`recorded` is that step's result: ``actor``,
``decided_at`` (ISO 8601), ``by`` when a person decided without the token, and, for the
decisions of a request that asked for them, ``approved``, ``reason``, ``payload`` (the
reviewer's edit, None for none) and ``expired``. A later attempt replays the step:
:func:`replayed` reads the same fields back, so the handler gets the same
:class:`ApprovalDecision` either way (a step recorded before a field existed gives its default:
an approval).

A decision is the handler's to act on (:func:`answers`) when it approves, or when it rejects or
expires a request that said ``on_reject="return"`` / ``on_expire="return"`` (the run resumed
instead of failing); other decisions leave the handler to ask again (a retried run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from awooop.runs import approval_options as options
from awooop.runs.approvals import Decision as Verdict
from awooop.runs.approvals import DecisionRecord


@dataclass(frozen=True)
class ApprovalDecision:
    """What ``wait_for_approval`` returns: who decided and when, whether it was approved, the
    reviewer's reason, the payload as the reviewer edited it (None: not edited), and whether
    the request expired undecided (then ``approved`` is False and ``actor`` None)."""

    name: str
    actor: str | None
    decided_at: datetime | None
    by: str | None = None  # the person, when a management token or console session decided
    approved: bool = True
    reason: str = ""
    payload: Any = None
    expired: bool = False


@dataclass(frozen=True)
class Ask:
    """A request's options, checked before anything is written (E-INPUT-001, E-DATA-00x)."""

    payload: Any
    on_reject: str
    on_expire: str
    expires_in_s: float | None


def ask(
    payload: Any,
    expires_in: timedelta | None,
    on_reject: str,
    on_expire: str,
    max_bytes: int,
) -> Ask:
    return Ask(
        payload=None if payload is None else options.check_payload("payload", payload, max_bytes),
        on_reject=options.check_policy("on_reject", on_reject),
        on_expire=options.check_policy("on_expire", on_expire),
        expires_in_s=options.expires_in_s(expires_in),
    )


def answers(found: DecisionRecord | None) -> bool:
    """Whether ``found`` is a decision the handler gets (see the module doc)."""
    return found is not None and (found.decision is Verdict.APPROVED or found.resumed)


def recorded(found: DecisionRecord | ApprovalDecision) -> dict[str, Any]:
    """The step result journaled for a decision (found, or as the handler got it)."""
    if isinstance(found, DecisionRecord):
        approved = found.decision is Verdict.APPROVED
        expired = found.decision is Verdict.EXPIRED
    else:
        approved, expired = found.approved, found.expired
    when = found.decided_at
    grant: dict[str, Any] = {"actor": found.actor, "decided_at": when and when.isoformat()}
    if found.by is not None:
        grant["by"] = found.by
    grant.update(approved=approved, expired=expired, reason=found.reason, payload=found.payload)
    return grant


def replayed(name: str, result: Any) -> ApprovalDecision:
    """The decision from a journaled ``approval:<name>`` step result (a step recorded without
    a field gives its default)."""
    fields: dict[str, Any] = result if isinstance(result, dict) else {}
    when = fields.get("decided_at")
    return ApprovalDecision(
        name=name,
        actor=_text(fields.get("actor")),
        decided_at=datetime.fromisoformat(when) if isinstance(when, str) else None,
        by=_text(fields.get("by")),
        approved=fields.get("approved", True) is True,
        reason=_text(fields.get("reason")) or "",
        payload=fields.get("payload"),
        expired=fields.get("expired", False) is True,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
