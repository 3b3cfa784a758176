"""Fair share routes (flow control, :mod:`awooop.runs.fairness`).

    GET /v1/projects/{project_id}/share
    PUT /v1/projects/{project_id}/share   {"weight": N, "actor"?}

Management routes (:mod:`awooop.http.auth`). The GET answers the project's weight (1 when it
was never set) to any management token of the project. The PUT needs an ``admin`` token: a
project's weight is a claim on every other project's capacity, so a project's own manage
token cannot raise it (403 E-AUTH-003, the scope refusal). It answers the share as stored;
400 E-INPUT-001 for a weight that is not an integer from 1 to 1000 (nothing written).
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import ScopeForbiddenError
from awooop.http.auth import require
from awooop.http.ingest import decode_body, json_response, read_body
from awooop.ingest.credentials import ADMIN_SCOPE, check_project_id
from awooop.runs import fairness
from awooop.services import Services

PATH = "/v1/projects/{project_id}/share"


class ShareBody(msgspec.Struct, forbid_unknown_fields=True):
    weight: int
    actor: str | None = None


def routes(services: Services) -> list[BaseRoute]:
    limit = services.settings.http_max_body_bytes

    async def show(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        found = await services.db.in_platform(lambda conn: fairness.shares(conn, project_id))
        return json_response(msgspec.to_builtins(found[0]), 200)

    async def put(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        if who.scope != ADMIN_SCOPE:
            raise ScopeForbiddenError("only an admin token sets a project's weight")
        body = decode_body(await read_body(request, limit), ShareBody)
        actor = who.actor if body.actor is None else body.actor
        share = await services.db.in_platform_writes(
            lambda conn: fairness.set_share(conn, project_id, body.weight, actor=actor)
        )
        return json_response(msgspec.to_builtins(share), 200)

    return [Route(PATH, show, methods=["GET"]), Route(PATH, put, methods=["PUT"])]
