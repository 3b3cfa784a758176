"""A handler that asks a reviewer about a draft (``run.wait_for_approval`` with a payload) and
acts on the decision, for the approval-decision tests.

The run's input says how it asks: ``on_reject`` / ``on_expire`` ("fail" or "return", absent:
the default), ``expires_s`` (the request's own expiry), ``crash`` (the first attempt that gets
the decision live dies after it: the runtime's store "unavailable", the attempt handed back
uncharged), ``confirm`` (a second approval after the first). Every decision the handler was
given is appended to :data:`DECISIONS` with its attempt and whether it was replayed.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

from awooop.core.errors import DatabaseUnavailableError
from awooop.runs.approvals import ApprovalTicket
from awooop.worker.context import RunContext

DRAFT = {"to": "ann@example.com", "body": "draft text"}
DECISIONS: list[dict[str, Any]] = []
TICKETS: list[ApprovalTicket] = []


async def remember(ticket: ApprovalTicket) -> None:
    TICKETS.append(ticket)


async def reviewed(run: RunContext) -> dict[str, Any]:
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    replayed = "approval:send" in run.steps
    expires_s = options.get("expires_s")
    decision = await run.wait_for_approval(
        "send",
        reason="check the mail",
        notify=remember,
        payload=DRAFT,
        expires_in=None if expires_s is None else timedelta(seconds=expires_s),
        on_reject=options.get("on_reject", "fail"),
        on_expire=options.get("on_expire", "fail"),
    )
    DECISIONS.append({"attempt": run.attempt, "replayed": replayed, **asdict(decision)})
    if options.get("crash") and not replayed:
        raise DatabaseUnavailableError("simulated crash after the decision")
    if options.get("confirm"):
        await run.wait_for_approval("confirm", notify=remember)
    if not decision.approved:
        return {"held": True, "expired": decision.expired, "why": decision.reason}
    mail = decision.payload if decision.payload is not None else DRAFT
    return {"sent": await run.step("send", lambda: _sent(mail)), "why": decision.reason}


async def _sent(mail: Any) -> Any:
    return mail
