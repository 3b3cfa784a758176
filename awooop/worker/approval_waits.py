"""``run.wait_for_approval`` once its step is not journaled yet: the decision found for it
(journaled as the step ``approval:<name>``, returned to the handler) or a new request (the
notifier gets its ticket, then the attempt ends: :class:`Suspended`).

:func:`decide_or_ask` is the runtime's, in one tenant transaction; the test kit
(:mod:`awooop.testing.context`) finds and requests in memory instead and shares the rest:
:func:`granted` (the step's event) and :func:`notify`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from awooop.core.db import Database
from awooop.core.events import Event, StepCompleted
from awooop.core.retries import unavailable_on_store_errors
from awooop.eventlog.state import RunState
from awooop.runs import approvals, leases
from awooop.runs.approvals import ApprovalTicket
from awooop.worker import approval_grants
from awooop.worker.approval_grants import ApprovalDecision
from awooop.worker.attempts import Attempt, trace_metadata

APPROVAL_STEP_PREFIX = "approval:"

Notifier = Callable[[ApprovalTicket], Awaitable[None]]


class Suspended(BaseException):
    """The attempt ended by waiting for approval (raised out of ``wait_for_approval``).

    A BaseException so that a handler's ``except Exception`` does not swallow it."""


def granted(
    worker_id: str, attempt: int, name: str, grant: dict[str, Any]
) -> Callable[[RunState, datetime], Event]:
    """The event that journals a found decision (:func:`approval_grants.recorded`) as the
    step of approval ``name``."""
    return lambda _s, now: StepCompleted(
        at=now,
        worker_id=worker_id,
        attempt=attempt,
        step=APPROVAL_STEP_PREFIX + name,
        result=grant,
    )


async def decide_or_ask(
    db: Database,
    attempt: Attempt,
    log: Any,
    name: str,
    reason: str,
    ask: approval_grants.Ask,
    *,
    ttl_s: float,
    io_timeout_s: float | None,
) -> ApprovalDecision | ApprovalTicket:
    """In one tenant transaction of the run's project: the decision that answers approval
    ``name`` (journaled, fenced, as its step), else a new request (the attempt is finishing:
    its lease is released with it)."""

    async def in_transaction(conn: Any) -> ApprovalDecision | ApprovalTicket:
        found = await approvals.find_decision(conn, attempt.run_id, name)
        if found is not None and approval_grants.answers(found):
            grant = approval_grants.recorded(found)
            await leases.fenced_record(
                conn,
                attempt.run_id,
                attempt.worker_id,
                attempt.number,
                granted(attempt.worker_id, attempt.number, name, grant),
                trace_metadata(),
            )
            return approval_grants.replayed(name, grant)
        attempt.finishing = True
        return await approvals.request(
            conn,
            attempt.run_id,
            attempt.worker_id,
            attempt.number,
            name=name,
            reason=reason,
            ttl_s=ttl_s,
            metadata=trace_metadata(),
            **vars(ask),
        )

    try:
        with unavailable_on_store_errors("the approval request failed"):
            outcome = await db.in_tenant(attempt.project_id, in_transaction, timeout_s=io_timeout_s)
    except BaseException:
        attempt.finishing = False
        raise
    if isinstance(outcome, ApprovalTicket):
        log.info("approval_requested", name=name, expires_at=outcome.expires_at.isoformat())
    return outcome


async def notify(log: Any, name: str, ticket: ApprovalTicket, notifier: Notifier | None) -> None:
    """Hand ``ticket`` to ``notifier``; its error is logged, never the handler's (which then
    raises :class:`Suspended`)."""
    if notifier is not None:
        try:
            await notifier(ticket)
        except Exception:
            log.exception("approval_notify_failed", name=name)
