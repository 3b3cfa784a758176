"""Concurrency limit routes (flow control, :mod:`awooop.runs.concurrency`).

    POST /v1/projects/{project_id}/limits         {"channel": C | "contract": K, "key": EXPR,
                                                   "max"?: EXPR, "global_max"?: N,
                                                   "depth_cap"?: N, "actor"?}
    POST /v1/projects/{project_id}/limits/remove  {"channel": C | "contract": K, "actor"?}
    GET  /v1/projects/{project_id}/limits[?top=N]

Management routes (:mod:`awooop.http.auth`), in a tenant transaction of the project in the
path. The POST answers the limit as stored (400 E-INPUT-001 for an expression that does not
parse); ``remove`` the dropped limit, or 404 E-CONCURRENCY-002; the GET the project's limits
and its ``top`` keys (default 20) with the most runs waiting, then executing.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import InvalidInputError
from awooop.http.auth import require
from awooop.http.ingest import decode_body, json_response, read_body
from awooop.ingest.credentials import check_project_id
from awooop.runs import concurrency
from awooop.runs.pause_rules import Scope, scope_of
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}/limits"
MAX_TOP = 1000


class ConcurrencyLimitBody(msgspec.Struct, forbid_unknown_fields=True):
    channel: str | None = None
    contract: str | None = None
    key: str | None = None
    max: str = "1"
    global_max: int | None = None
    depth_cap: int | None = None
    actor: str | None = None


def _scope(body: ConcurrencyLimitBody) -> tuple[Scope, str]:
    scope, key = scope_of(body.channel, body.contract)
    if scope is Scope.PROJECT:
        raise InvalidInputError("name a channel or a contract")
    return scope, key


def _json(value: Any) -> dict[str, Any]:
    return msgspec.to_builtins(asdict(value))  # type: ignore[no-any-return]


def routes(services: Services) -> list[BaseRoute]:
    body_limit = services.settings.http_max_body_bytes

    async def set_limit(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body = decode_body(await read_body(request, body_limit), ConcurrencyLimitBody)
        scope, key = _scope(body)
        if not body.key:
            raise InvalidInputError("key: the key expression is required")
        key_expr = body.key
        made = await services.db.in_tenant(
            project_id,
            lambda conn: concurrency.set_limit(
                conn,
                project_id,
                scope,
                key,
                key_expr=key_expr,
                max_expr=body.max,
                global_max=body.global_max,
                depth_cap=body.depth_cap,
                actor=body.actor or who.actor,
            ),
        )
        return json_response(_json(made), 200)

    async def remove(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body = decode_body(await read_body(request, body_limit), ConcurrencyLimitBody)
        scope, key = _scope(body)
        gone = await services.db.in_tenant(
            project_id,
            lambda conn: concurrency.remove_limit(
                conn, project_id, scope, key, actor=body.actor or who.actor
            ),
        )
        return json_response(_json(gone), 200)

    async def listing(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        raw = request.query_params.get("top", "20")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_TOP:
            raise InvalidInputError(f"top must be 1-{MAX_TOP}")
        top = int(raw)

        async def both(conn: Any) -> dict[str, Any]:
            limits = await concurrency.listing(conn, project_id)
            keys = await concurrency.usage(conn, project_id, top)
            return {"limits": [_json(x) for x in limits], "keys": [_json(k) for k in keys]}

        return json_response(await services.db.in_tenant(project_id, both), 200)

    return [
        Route(PREFIX, set_limit, methods=["POST"]),
        Route(PREFIX + "/remove", remove, methods=["POST"]),
        Route(PREFIX, listing, methods=["GET"]),
    ]
