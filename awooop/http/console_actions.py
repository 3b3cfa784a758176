"""The console's run actions: ``POST /ui/runs/{project_id}/{run_id}/{action}`` (retry, cancel,
approve, reject, redrive), done through the same functions as the CLI
(:mod:`awooop.runs.control`, :mod:`awooop.runs.approvals`, :mod:`awooop.runs.deadletters`)."""

from __future__ import annotations

import uuid
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from awooop.core.db import Connection
from awooop.core.errors import AwoooPError, InvalidInputError
from awooop.eventlog.state import RunState
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_render import error_page
from awooop.http.console_requests import path_action, path_run
from awooop.runs import approval_options, approvals, control, deadletters

ACTIONS = ("retry", "cancel", "approve", "reject", "redrive")


def extra_attempts(fields: dict[str, str]) -> int:
    """Pure: a form's extra attempts (3 when left empty)."""
    attempts = fields.get("attempts", "3").strip() or "3"
    if not attempts.isdigit():
        raise InvalidInputError("extra attempts must be a whole number")
    return int(attempts)


class RunActions(ConsoleAccess):
    async def act(self, request: Request) -> Response:
        posted = await self.posted(request)
        if isinstance(posted, Response):
            return posted
        session, fields = posted
        try:
            project_id, run_id = path_run(request)
            action = path_action(request, ACTIONS)
            principal = authorize_stored(session.principal, project_id, write=True)
            done = await self.perform(principal.actor, project_id, run_id, action, fields)
        except AwoooPError as exc:
            return error_page(exc, session, request)
        response = sessions.redirect_noting(request, f"/ui/runs/{project_id}/{run_id}", done)
        if action in ("approve", "reject"):  # the form's name field, filled in next time
            name = quote(fields.get("by", "").strip()[: approvals.MAX_NAME_LENGTH])
            sessions.set_cookie(response, request, sessions.NAME_COOKIE, name, sessions.NAME_S)
        return response

    async def perform(
        self, actor: str, project_id: str, run_id: uuid.UUID, action: str, fields: dict[str, str]
    ) -> str:
        """Do ``action`` as the CLI does, recorded with ``actor``; what the page says after."""
        if action == "redrive":
            return await self.redrive(actor, project_id, run_id, fields.get("entry", ""))
        state = await self.services.db.in_tenant(
            project_id, lambda conn: self.change(conn, actor, run_id, action, fields)
        )
        return f"{action}: the run is {state.status.value}"

    async def redrive(self, actor: str, project_id: str, run_id: uuid.UUID, wanted: str) -> str:
        entries = await self.services.db.in_tenant(
            project_id, lambda conn: deadletters.entries_of_run(conn, project_id, run_id)
        )
        entry = next((e for e in entries if str(e.dead_letter_id) == wanted), None)
        if entry is None:
            raise InvalidInputError(f"no dead letter {wanted[:40]!r} of this run")
        result = await deadletters.redrive(self.services, entry, actor=actor)
        return f"dead letter {result.id}: {result.outcome.value} {result.detail}".strip()

    async def change(
        self,
        conn: Connection,
        actor: str,
        run_id: uuid.UUID,
        action: str,
        fields: dict[str, str],
    ) -> RunState:
        """Retry, cancel, approve or reject: the token as ``actor`` in the event's metadata,
        the person the form names (else the token) in the event. Approve and reject need no
        approval token: the session's token decides (the event's ``actor``) for the person
        the form must name (its ``by``, :func:`awooop.runs.approvals.decide_as`)."""
        metadata = {"actor": actor, "via": "console"}
        person = fields.get("actor", "").strip() or actor
        match action:
            case "retry":
                return await control.retry(
                    conn,
                    run_id,
                    actor=person,
                    extra_attempts=extra_attempts(fields),
                    metadata=metadata,
                )
            case "cancel":
                return await control.cancel(
                    conn, run_id, actor=person, reason=fields.get("reason", ""), metadata=metadata
                )
            case _:
                decision = (
                    approvals.Decision.APPROVED
                    if action == "approve"
                    else approvals.Decision.REJECTED
                )
                limit = self.services.settings.step_result_max_bytes
                edited = fields.get("payload", "")
                return await approvals.decide_as(
                    conn,
                    run_id,
                    decision,
                    actor=actor,
                    by=fields.get("by", ""),
                    reason=fields.get("reason", ""),
                    metadata=metadata,
                    payload=approval_options.parse_payload("the edited payload", edited, limit),
                    payload_max_bytes=limit,
                )
