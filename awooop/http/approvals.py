"""Run control routes: approve, reject (R-14), cancel and retry.

    POST /v1/projects/{project_id}/runs/{run_id}/approve  {"token": "...", "actor"?: "alice"}
                                                          or {"by": "alice"}
    POST /v1/projects/{project_id}/runs/{run_id}/reject   {"token": "...", "reason"?: "..."}
                                                          or {"by": "alice", "reason"?: "..."}
    (approve and reject both take "reason"?: "..." and "payload"?: <JSON>, the edited draft)
    POST /v1/projects/{project_id}/runs/{run_id}/cancel   {"actor"?: "ops", "reason"?: "..."}
    POST /v1/projects/{project_id}/runs/{run_id}/retry    {"attempts"?: 3, "actor"?: "ops"}

Every route is a management route: ``Authorization: Bearer`` with a token of scope ``manage``
for the project or ``admin`` (:mod:`awooop.http.auth`), checked before the body is read.
Approve and reject take either the run's single-use approval token (R-14: the approval token
names the one request it answers and can be spent once; what a notifier hands the approver)
or, without it, ``by``: the name of the person deciding as the bearer token, which may act on
the project anyway (as a console session does, :func:`awooop.runs.approvals.decide_as`). Either
way the run's open request is closed once: a second decision, with or without the token, is
E-APPROVAL-003. The event records who acted: with the token, ``actor`` in the body (a
person's name; default the token's identity) goes into the event; without it, the token's
identity is the event's ``actor`` and the name its ``by``. The authenticated token
(``<scope>-token:<token_id>``) is in the event's metadata as ``actor``. A decision's
``reason`` (at most 2,000 characters) and ``payload`` (the handler's draft as the reviewer
edited it; at most AWOOOP_STEP_RESULT_MAX_BYTES as JSON; null: not edited) go into the event
and reach the handler (:mod:`awooop.runs.approval_options`).

Every answer is the run's state as JSON (200), or a catalog error: E-AUTH-001 (401, missing or
unknown bearer token), E-AUTH-002 (403, another project's token), E-AUTH-003 (403, not a
management token), E-APPROVAL-001 (403, unknown approval token), E-APPROVAL-002 (410,
expired), E-APPROVAL-003 (409, already used), E-RUN-001 (409, not allowed in the run's state),
E-RUN-003 (404), E-INPUT-001 (400, malformed body or project id, a reason too long), E-INPUT-003
(413), E-DATA-001 (422, a payload Postgres cannot store), E-DATA-002 (422, a payload over the
limit). A refused request writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError, RunNotFoundError
from awooop.eventlog.state import RunState
from awooop.http.auth import Principal, require
from awooop.http.ingest import decode_body, read_body
from awooop.ingest.credentials import check_project_id
from awooop.runs import approvals, control
from awooop.runs.approvals import Decision
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}/runs/{run_id}"
MAX_ACTOR = 200
DEFAULT_RETRY_ATTEMPTS = 3


class DecisionBody(msgspec.Struct, forbid_unknown_fields=True):
    token: str | None = None
    actor: str | None = None
    reason: str = ""
    by: str | None = None  # without the token: who decides as the bearer token
    payload: Any = None  # the draft as the reviewer edited it


class CancelBody(msgspec.Struct, forbid_unknown_fields=True):
    actor: str | None = None
    reason: str = ""


class RetryBody(msgspec.Struct, forbid_unknown_fields=True):
    attempts: int = DEFAULT_RETRY_ATTEMPTS
    actor: str | None = None


def run_view(state: RunState) -> dict[str, Any]:
    view: dict[str, Any] = msgspec.to_builtins(state)
    view.pop("input", None)
    return view


def _actor(named: str | None, principal: Principal) -> str:
    actor = principal.actor if named is None else named
    if not actor or len(actor) > MAX_ACTOR:
        raise InvalidInputError(f"actor must be 1-{MAX_ACTOR} characters")
    return actor


def _ids(request: Request) -> tuple[str, uuid.UUID]:
    project_id = check_project_id(request.path_params["project_id"])
    try:
        run_id = uuid.UUID(request.path_params["run_id"])
    except ValueError:
        raise RunNotFoundError(run_id=request.path_params["run_id"][:64]) from None
    return project_id, run_id


Action = Callable[[Connection, uuid.UUID, bytes, Principal], Awaitable[RunState]]


def routes(services: Services) -> list[BaseRoute]:
    limit = services.settings.http_max_body_bytes
    payload_max = services.settings.step_result_max_bytes

    def route(action: Action) -> Callable[[Request], Awaitable[Response]]:
        """Authorise, read the body, then act in one tenant transaction of the project."""

        async def endpoint(request: Request) -> Response:
            project_id = check_project_id(request.path_params["project_id"])
            principal = await require(services, request, project_id)
            _, run_id = _ids(request)
            raw = await read_body(request, limit)
            state = await services.db.in_tenant(
                project_id, lambda conn: action(conn, run_id, raw, principal)
            )
            return JSONResponse(run_view(state))

        return endpoint

    def decide(decision: Decision) -> Action:
        async def act(conn: Connection, run_id: uuid.UUID, raw: bytes, who: Principal) -> RunState:
            body: DecisionBody = decode_body(raw, DecisionBody)
            if body.token is None:
                if body.by is None or body.actor is not None:
                    raise InvalidInputError(
                        'give the approval token ("token"), or who decides ("by") without it'
                    )
                return await approvals.decide_as(
                    conn,
                    run_id,
                    decision,
                    actor=who.actor,
                    by=body.by,
                    reason=body.reason,
                    metadata=who.metadata(),
                    payload=body.payload,
                    payload_max_bytes=payload_max,
                )
            if body.by is not None:
                raise InvalidInputError('"by" is for a decision without the approval token')
            return await approvals.decide(
                conn,
                run_id,
                body.token,
                decision,
                actor=_actor(body.actor, who),
                reason=body.reason,
                metadata=who.metadata(),
                payload=body.payload,
                payload_max_bytes=payload_max,
            )

        return act

    async def cancel(conn: Connection, run_id: uuid.UUID, raw: bytes, who: Principal) -> RunState:
        body: CancelBody = decode_body(raw, CancelBody)
        return await control.cancel(
            conn, run_id, actor=_actor(body.actor, who), reason=body.reason, metadata=who.metadata()
        )

    async def retry(conn: Connection, run_id: uuid.UUID, raw: bytes, who: Principal) -> RunState:
        body: RetryBody = decode_body(raw, RetryBody)
        return await control.retry(
            conn,
            run_id,
            actor=_actor(body.actor, who),
            extra_attempts=body.attempts,
            metadata=who.metadata(),
        )

    return [
        Route(PREFIX + "/approve", route(decide(Decision.APPROVED)), methods=["POST"]),
        Route(PREFIX + "/reject", route(decide(Decision.REJECTED)), methods=["POST"]),
        Route(PREFIX + "/cancel", route(cancel), methods=["POST"]),
        Route(PREFIX + "/retry", route(retry), methods=["POST"]),
    ]
