"""Run control routes: approve, reject (R-14) and cancel.

    POST /v1/projects/{project_id}/runs/{run_id}/approve  {"token": "...", "actor": "alice"}
    POST /v1/projects/{project_id}/runs/{run_id}/reject   {"token": "...", "reason": "..."}
    POST /v1/projects/{project_id}/runs/{run_id}/cancel   {"actor": "ops", "reason": "..."}

Approve and reject are authorised by the single-use approval token itself (it is the
capability the approver was handed). Cancel needs a bearer token of the project
(``Authorization: Bearer awp_...``, as ``GET .../runs/{run_id}``; 401 E-AUTH-001 without),
checked in the same tenant transaction as the cancel.

Every answer is the run's state as JSON (200), or a catalog error: E-APPROVAL-001 (403,
unknown token), E-APPROVAL-002 (410, expired), E-APPROVAL-003 (409, already used), E-RUN-001
(409, not allowed in the run's state), E-RUN-003 (404), E-INPUT-001 (400, malformed body or
project id), E-INPUT-003 (413). A refused request writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from awooop.db import Connection
from awooop.errors import InvalidInputError, RunNotFoundError
from awooop.http.ingest import lowercase_headers, read_body
from awooop.http.runs import TOKEN_HASH
from awooop.ingest.auth import authenticate_bearer, bearer_token_id
from awooop.ingest.common import StoredCredential
from awooop.ingest.credentials import check_project_id
from awooop.runs import approvals, control
from awooop.runs.approvals import Decision
from awooop.runs.state import RunState
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}/runs/{run_id}"


class DecisionBody(msgspec.Struct, forbid_unknown_fields=True):
    token: str
    actor: str = "api"
    reason: str = ""


class CancelBody(msgspec.Struct, forbid_unknown_fields=True):
    actor: str = "api"
    reason: str = ""


def run_view(state: RunState) -> dict[str, Any]:
    view: dict[str, Any] = msgspec.to_builtins(state)
    view.pop("input", None)
    return view


def _decode(raw: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"invalid request body: {exc}") from None


def _ids(request: Request) -> tuple[str, uuid.UUID]:
    project_id = check_project_id(request.path_params["project_id"])
    try:
        run_id = uuid.UUID(request.path_params["run_id"])
    except ValueError:
        raise RunNotFoundError(run_id=request.path_params["run_id"][:64]) from None
    return project_id, run_id


async def authenticate(conn: Connection, headers: dict[str, str], project_id: str) -> None:
    """A live bearer token of ``project_id`` (E-AUTH-001 otherwise), in the caller's tenant
    transaction."""
    token_id = bearer_token_id(headers)
    token_hash = None if token_id is None else await conn.fetchval(TOKEN_HASH, token_id, project_id)
    authenticate_bearer(headers, b"", StoredCredential(token_hash=token_hash))


def routes(services: Services) -> list[BaseRoute]:
    limit = services.settings.http_max_body_bytes

    def decision_route(decision: Decision) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            project_id, run_id = _ids(request)
            body: DecisionBody = _decode(await read_body(request, limit), DecisionBody)
            if len(body.actor) > 200 or len(body.reason) > control.MAX_REASON:
                raise InvalidInputError("actor or reason too long")
            state = await services.db.in_tenant(
                project_id,
                lambda conn: approvals.decide(
                    conn, run_id, body.token, decision, actor=body.actor, reason=body.reason
                ),
            )
            return JSONResponse(run_view(state))

        return endpoint

    async def cancel(request: Request) -> Response:
        project_id, run_id = _ids(request)
        headers = lowercase_headers(request)
        raw = await read_body(request, limit)

        async def act(conn: Connection) -> RunState:
            await authenticate(conn, headers, project_id)
            body: CancelBody = _decode(raw, CancelBody)
            return await control.cancel(conn, run_id, actor=body.actor, reason=body.reason)

        state = await services.db.in_tenant(project_id, act)
        return JSONResponse(run_view(state))

    return [
        Route(PREFIX + "/approve", decision_route(Decision.APPROVED), methods=["POST"]),
        Route(PREFIX + "/reject", decision_route(Decision.REJECTED), methods=["POST"]),
        Route(PREFIX + "/cancel", cancel, methods=["POST"]),
    ]
