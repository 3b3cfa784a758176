"""The approvals of a :class:`~awooop.testing.HandlerKit` run, in memory: what
``awooop_approvals`` and :mod:`awooop.runs.approvals` keep and decide on Postgres (the open
request, its single-use decision, its expiry), giving the events those write."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from awooop.core.errors import ApprovalExpiredError, ApprovalTokenUsedError, InvalidInputError
from awooop.core.events import ApprovalExpired, ApprovalGranted, ApprovalRejected, ApprovalRequested
from awooop.runs import approval_options as options
from awooop.runs.approvals import ApprovalTicket, Decision, DecisionRecord, new_token
from awooop.worker.approval_grants import Ask


@dataclass(frozen=True)
class Approve:
    """A decision: the approval is granted by ``actor`` (``by``: the person, for a decision
    made without the approval token), with a ``reason`` and the ``payload`` as the reviewer
    edited it (None, or the draft itself: not edited)."""

    actor: str = "test"
    by: str | None = None
    reason: str = ""
    payload: Any = None


@dataclass(frozen=True)
class Reject:
    """A decision: the approval is rejected. The run FAILS with E-APPROVAL-004, or, when the
    request said ``on_reject="return"``, resumes and the handler gets the rejection."""

    actor: str = "test"
    reason: str = ""
    by: str | None = None
    payload: Any = None


@dataclass
class Approvals:
    """The run's open request (``ticket`` and its ``request`` event) and its decisions."""

    ticket: ApprovalTicket | None = None
    request: ApprovalRequested | None = None
    decisions: dict[str, DecisionRecord] = field(default_factory=dict)

    def opened(self, run_id: uuid.UUID, project_id: str, name: str, event: Any) -> ApprovalTicket:
        """The ticket of a request whose ``ApprovalRequested`` was written."""
        assert isinstance(event, ApprovalRequested)
        self.request = event
        self.decisions.pop(name, None)  # a new request of that name (a retried run)
        self.ticket = ApprovalTicket(
            approval_id=uuid.uuid4(),
            run_id=run_id,
            project_id=project_id,
            name=name,
            token=new_token(),
            reason=event.reason,
            expires_at=event.expires_at,
            payload=event.payload,
        )
        return self.ticket

    def decide(
        self, name: str, decision: Approve | Reject, now: datetime, run_id: uuid.UUID
    ) -> ApprovalGranted | ApprovalRejected:
        """The event of ``decision`` on the open request ``name``, refused as a spent, expired
        or unknown token is."""
        ticket, request = self.ticket, self.request
        found = self.decisions.get(name)
        if found is not None and found.decision is Decision.EXPIRED:
            raise ApprovalExpiredError(run_id=run_id, expired_at=found.decided_at)
        if found is not None:
            raise ApprovalTokenUsedError(run_id=run_id, used_at=found.decided_at)
        if ticket is None or request is None or ticket.name != name:
            raise InvalidInputError(f"the run waits for no approval named {name!r}")
        if ticket.expires_at <= now:
            raise ApprovalExpiredError(run_id=run_id, expired_at=ticket.expires_at)
        reason = options.check_reason(decision.reason)
        payload = None if decision.payload == request.payload else decision.payload
        if payload is not None:
            payload = options.check_payload("payload", payload)
        actor, by = decision.actor, decision.by
        if isinstance(decision, Approve):
            self._decided(name, Decision.APPROVED, actor, now, by, reason, payload, False)
            return ApprovalGranted(at=now, actor=actor, by=by, reason=reason, payload=payload)
        resumed = request.on_reject == options.RETURN
        self._decided(name, Decision.REJECTED, actor, now, by, reason, payload, resumed)
        return ApprovalRejected(
            at=now, actor=actor, reason=reason, by=by, payload=payload, resumed=resumed
        )

    def expired(self, now: datetime) -> ApprovalExpired | None:
        """The expiry of the open request once its deadline passed (the expiry loop's)."""
        ticket, request = self.ticket, self.request
        if ticket is None or request is None or ticket.expires_at > now:
            return None
        resumed = request.on_expire == options.RETURN
        self._decided(ticket.name, Decision.EXPIRED, None, now, None, "", None, resumed)
        return ApprovalExpired(at=now, resumed=resumed)

    def _decided(
        self,
        name: str,
        verdict: Decision,
        actor: str | None,
        now: datetime,
        by: str | None,
        reason: str,
        payload: Any,
        resumed: bool,
    ) -> None:
        self.decisions[name] = DecisionRecord(
            decision=verdict,
            actor=actor,
            decided_at=now,
            by=by,
            reason=reason,
            payload=payload,
            resumed=resumed,
        )
        self.ticket = self.request = None


def requested(
    worker_id: str, attempt: int, reason: str, ask: Ask, default_ttl_s: float
) -> Callable[[Any, datetime], ApprovalRequested]:
    """The ``ApprovalRequested`` :func:`awooop.runs.approvals.request` writes, as a fenced
    write's maker (its expiry ``ask.expires_in_s`` from now, else ``default_ttl_s``)."""
    ttl_s = ask.expires_in_s or default_ttl_s

    def make(_state: Any, now: datetime) -> ApprovalRequested:
        return ApprovalRequested(
            at=now,
            worker_id=worker_id,
            attempt=attempt,
            expires_at=now + timedelta(seconds=ttl_s),
            reason=reason,
            payload=ask.payload,
            on_reject=ask.on_reject,
            on_expire=ask.on_expire,
            expires_in_s=ask.expires_in_s,
        )

    return make
