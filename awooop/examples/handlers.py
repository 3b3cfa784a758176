"""Example run handlers: the one the demo runs, and a no-op for benchmarks.

``handle`` shows the handler API (see :mod:`awooop.worker.context`): two journaled steps
around a model call that is itself journaled, an optional approval (input ``{"approval":
true}``), and a result. Run it with::

    awooop worker --handler awooop.examples.handlers:handle

Approval tokens go to :func:`notify_approval`: appended as a JSON line to the file named by
``AWOOOP_EXAMPLE_APPROVALS`` when set (the demo reads it), else logged. Logging a token is for
demos only; a real handler sends it to the approver (Telegram, mail, ...).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import msgspec

from awooop.core.logs import get_logger
from awooop.runs.approvals import ApprovalTicket
from awooop.worker.context import RunContext

log = get_logger(__name__)

APPROVALS_FILE_ENV = "AWOOOP_EXAMPLE_APPROVALS"


async def notify_approval(ticket: ApprovalTicket) -> None:
    path = os.environ.get(APPROVALS_FILE_ENV)
    if path:
        with open(path, "ab") as out:  # noqa: ASYNC230 - one small append per approval
            out.write(msgspec.json.encode(ticket) + b"\n")
        return
    log.warning(
        "approval_token",
        run_id=str(ticket.run_id),
        name=ticket.name,
        command=f"awooop runs approve {ticket.project_id} {ticket.run_id} --token {ticket.token}",
    )


def _text_of(payload: Any) -> str:
    if isinstance(payload, dict):
        for key in ("text", "message", "summary"):
            value = payload.get(key)
            if isinstance(value, str):
                return value
    return msgspec.json.encode(payload).decode()


async def handle(run: RunContext) -> dict[str, Any]:
    async def parse() -> dict[str, Any]:
        return {"text": _text_of(run.input)[:4000]}

    parsed = await run.step("parse", parse)

    work_s = run.input.get("work_s") if isinstance(run.input, dict) else None
    if isinstance(work_s, int | float) and work_s > 0:
        # Stands for slow work with a side effect (the demo kills a worker during it).
        async def work() -> dict[str, Any]:
            await asyncio.sleep(min(float(work_s), 60.0))
            return {"worked_s": work_s}

        await run.step("work", work)

    async def ask() -> dict[str, Any]:
        answer = await run.llm(f"Summarise for an on-call engineer:\n{parsed['text']}")
        return {
            "text": answer.text,
            "model": answer.model,
            "revision_id": str(answer.revision_id),
        }

    answer = await run.step("summarise", ask)
    approved_by = None
    if isinstance(run.input, dict) and run.input.get("approval"):
        grant = await run.wait_for_approval(
            "act", reason=f"act on: {parsed['text'][:200]}", notify=notify_approval
        )
        approved_by = grant.by or grant.actor  # the person, else who held the token

    async def act() -> dict[str, Any]:
        run.log.info("acting", summary=answer["text"][:200])
        return {"acted": True}

    acted = await run.step("act", act)
    return {"summary": answer["text"], "approved_by": approved_by, **acted}


async def noop(run: RunContext) -> None:
    """Does nothing: end-to-end overhead of the runtime itself (benchmarks)."""
