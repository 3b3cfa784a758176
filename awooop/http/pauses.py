"""Pause and resume routes (flow control, :mod:`awooop.runs.pauses`).

    POST /v1/projects/{project_id}/pause   {"channel"?: C | "contract"?: K, "reason"?, "actor"?}
    POST /v1/projects/{project_id}/resume  {"channel"?: C | "contract"?: K, "actor"?}
    GET  /v1/projects/{project_id}/pauses[?history=1]

Management routes (:mod:`awooop.http.auth`): a ``manage`` token of the project or an ``admin``
token for the POSTs, a ``read`` token too for the GET. Each acts in a tenant transaction of
the project in the path, so a token of one project can neither see nor change another's
pauses. ``pause`` answers the active pause with ``created`` (false: the scope was already
paused; nothing changed); ``resume`` the ended pause, or 404 E-PAUSE-001 when the scope was
not paused; ``pauses`` the active pauses, newest first (with ``history``, the resumed ones
too). ``actor`` (a person's name; default the token's identity, ``<scope>-token:<id>``) is
recorded as who paused or resumed.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import InvalidInputError
from awooop.http.auth import Principal, require
from awooop.http.ingest import decode_body, json_response, read_body
from awooop.ingest.credentials import check_project_id
from awooop.runs import pauses
from awooop.runs.pause_rules import Pause, scope_of
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}"


class ScopeBody(msgspec.Struct, forbid_unknown_fields=True):
    channel: str | None = None
    contract: str | None = None
    reason: str = ""
    actor: str | None = None


def pause_body(p: Pause) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(p)
    body["active"] = p.active
    return body


def _actor(named: str | None, principal: Principal) -> str:
    return principal.actor if named is None else named


def routes(services: Services) -> list[BaseRoute]:
    limit = services.settings.http_max_body_bytes

    async def pause(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body = decode_body(await read_body(request, limit), ScopeBody)
        scope, key = scope_of(body.channel, body.contract)
        made, created = await services.db.in_tenant(
            project_id,
            lambda conn: pauses.pause(
                conn, project_id, scope, key, reason=body.reason, actor=_actor(body.actor, who)
            ),
        )
        return json_response({**pause_body(made), "created": created}, 200)

    async def resume(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body = decode_body(await read_body(request, limit), ScopeBody)
        if body.reason:
            raise InvalidInputError("a resume takes no reason")
        scope, key = scope_of(body.channel, body.contract)
        ended = await services.db.in_tenant(
            project_id,
            lambda conn: pauses.resume(conn, project_id, scope, key, actor=_actor(body.actor, who)),
        )
        return json_response(pause_body(ended), 200)

    async def listing(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        history = request.query_params.get("history", "") in ("1", "true")
        found = await services.db.in_tenant(
            project_id, lambda conn: pauses.listing(conn, project_id, history=history)
        )
        return json_response({"pauses": [pause_body(p) for p in found]}, 200)

    return [
        Route(PREFIX + "/pause", pause, methods=["POST"]),
        Route(PREFIX + "/resume", resume, methods=["POST"]),
        Route(PREFIX + "/pauses", listing, methods=["GET"]),
    ]
