"""Handler version routes (:mod:`awooop.runs.versions`).

    GET    /v1/projects/{project_id}/versions
    PUT    /v1/projects/{project_id}/versions/{contract_id}   {"versions": [V, ...], "actor"?}
    DELETE /v1/projects/{project_id}/versions/{contract_id}

Management routes (:mod:`awooop.http.auth`): a ``manage`` token of the project or an ``admin``
token for the PUT and the DELETE, a ``read`` token too for the GET; each acts in a tenant
transaction of the project in the path (another project's token: 403 E-AUTH-002). The PUT
makes or replaces the versions the contract's runs accept and answers the requirement as
stored (400 E-VERSION-001 for a bad version or list, nothing written); the DELETE answers the
dropped requirement, or 404 E-VERSION-002; the GET the project's requirements.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.http.auth import require
from awooop.http.ingest import decode_body, json_response, read_body
from awooop.ingest.credentials import check_project_id
from awooop.runs import versions
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}/versions"
CONTRACT = PREFIX + "/{contract_id}"


class VersionsBody(msgspec.Struct, forbid_unknown_fields=True):
    versions: list[Any]
    actor: str | None = None


def routes(services: Services) -> list[BaseRoute]:
    limit = services.settings.http_max_body_bytes

    async def listing(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        found = await services.db.in_tenant(
            project_id, lambda conn: versions.listing(conn, project_id)
        )
        return json_response(msgspec.to_builtins(found), 200)

    async def put(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        contract_id = versions.check_contract(request.path_params["contract_id"])
        body = decode_body(await read_body(request, limit), VersionsBody)
        accepted = versions.check_versions(body.versions)
        actor = who.actor if body.actor is None else body.actor
        made = await services.db.in_tenant(
            project_id,
            lambda conn: versions.require(conn, project_id, contract_id, accepted, actor=actor),
        )
        return json_response(msgspec.to_builtins(made), 200)

    async def delete(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        contract_id = versions.check_contract(request.path_params["contract_id"])
        gone = await services.db.in_tenant(
            project_id,
            lambda conn: versions.clear(conn, project_id, contract_id, actor=who.actor),
        )
        return json_response(msgspec.to_builtins(gone), 200)

    return [
        Route(PREFIX, listing, methods=["GET"]),
        Route(CONTRACT, put, methods=["PUT"]),
        Route(CONTRACT, delete, methods=["DELETE"]),
    ]
