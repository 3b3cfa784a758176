"""Budget, price and rate-limit routes (flow control of model calls,
:mod:`awooop.llm.flow_store`).

    GET    /v1/projects/{project_id}/budgets[?history=1]
    POST   /v1/projects/{project_id}/budget      {"tokens" | "cost", "period"?, "model"?,
                                                  "reserve"?, "on_exceed"?, "actor"?}
    DELETE /v1/projects/{project_id}/budget[?model=M]
    GET    /v1/projects/{project_id}/rate-limits[?history=1]
    POST   /v1/projects/{project_id}/rate-limit  {"limit", "period"?, "burst"?, "model"?,
                                                  "actor"?}
    DELETE /v1/projects/{project_id}/rate-limit[?model=M]
    GET    /v1/projects/{project_id}/prices[?history=1]
    POST   /v1/projects/{project_id}/price       {"model", "input", "output", "actor"?}
    DELETE /v1/projects/{project_id}/price?model=M

Management routes (:mod:`awooop.http.auth`): a ``manage`` token of the project or an
``admin`` token for the POSTs and DELETEs, a ``read`` token too for the GETs. Each acts in a
tenant transaction of the project in the path. A POST replaces the row in force (the old one
stays as history) and answers the new row; a DELETE ends it (404 E-BUDGET-003 when none). A
period is ``second|minute|hour|day|week`` or ``N`` followed by ``s|m|h|d|w`` (default: a day
for budgets, a second for rate limits). A budget is ``tokens`` or ``cost`` (credits per
period at the model's price; a budget in cost of one model without a price: 409
E-BUDGET-004, nothing written). A price is credits per 1,000 input and output tokens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.http.auth import require
from awooop.http.ingest import decode_body, json_response, read_body
from awooop.ingest.credentials import check_project_id
from awooop.llm import flow_forms, flow_store
from awooop.llm.flow_rules import OnExceed, check_model, view
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}"
# What a POST sets, on the connection of its tenant transaction.
Write = Callable[[Connection], Awaitable[Any]]
Endpoint = Callable[[Request], Awaitable[Response]]


class BudgetBody(msgspec.Struct, forbid_unknown_fields=True):
    tokens: int | None = None
    cost: int | None = None
    period: str = "day"
    model: str | None = None
    reserve: int = 1024
    on_exceed: OnExceed = OnExceed.WAIT
    actor: str | None = None


class RateLimitBody(msgspec.Struct, forbid_unknown_fields=True):
    limit: int
    period: str = "second"
    burst: int | None = None
    model: str | None = None
    actor: str | None = None


class PriceBody(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    input: Decimal
    output: Decimal
    actor: str | None = None


class Rows(NamedTuple):
    """One kind of row's three routes: POST and DELETE ``/<slug>``, GET ``/<slug>s`` (which
    answers ``{<slug with _>s: [...]}``); ``write`` (:mod:`awooop.llm.flow_forms`) checks a
    POST's body and says what it sets."""

    kind: flow_store.Kind[Any]
    body: type[Any]
    write: Callable[[Any, str, str, str], Write]
    rows: Callable[..., Awaitable[list[Any]]]


TABLE = (
    Rows(flow_store.BUDGETS, BudgetBody, flow_forms.budget, flow_store.budgets),
    Rows(flow_store.LIMITS, RateLimitBody, flow_forms.limit, flow_store.limits),
    Rows(flow_store.PRICES, PriceBody, flow_forms.price, flow_store.prices),
)


def routes(services: Services) -> list[BaseRoute]:
    limit_bytes = services.settings.http_max_body_bytes

    def put(rows: Rows) -> Endpoint:
        async def handler(request: Request) -> Response:
            project_id = check_project_id(request.path_params["project_id"])
            who = await require(services, request, project_id)
            body = decode_body(await read_body(request, limit_bytes), rows.body)
            # A price's model is checked with its prices (flow_rules.check_price).
            model = body.model if rows.kind.per_model else check_model(body.model)
            write = rows.write(body, project_id, model, body.actor or who.actor)
            return json_response(view(await services.db.in_tenant(project_id, write)), 200)

        return handler

    def end(rows: Rows) -> Endpoint:
        async def handler(request: Request) -> Response:
            project_id = check_project_id(request.path_params["project_id"])
            who = await require(services, request, project_id)
            model = check_model(request.query_params.get("model"))
            if rows.kind.per_model and not model:
                raise InvalidInputError(f"a {rows.kind.word} is ended by its model: ?model=M")
            ended = await services.db.in_tenant(
                project_id,
                lambda conn: flow_store.end(conn, rows.kind, project_id, model, actor=who.actor),
            )
            return json_response(view(ended), 200)

        return handler

    def listing(rows: Rows) -> Endpoint:
        async def handler(request: Request) -> Response:
            project_id = check_project_id(request.path_params["project_id"])
            await require(services, request, project_id)
            history = request.query_params.get("history", "") in ("1", "true")
            found = await services.db.in_tenant(
                project_id, lambda conn: rows.rows(conn, project_id, history=history)
            )
            key = rows.kind.slug.replace("-", "_") + "s"
            return json_response({key: [view(r) for r in found]}, 200)

        return handler

    return [
        route
        for rows in TABLE
        for route in (
            Route(f"{PREFIX}/{rows.kind.slug}", put(rows), methods=["POST"]),
            Route(f"{PREFIX}/{rows.kind.slug}", end(rows), methods=["DELETE"]),
            Route(f"{PREFIX}/{rows.kind.slug}s", listing(rows), methods=["GET"]),
        )
    ]
