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

from decimal import Decimal
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import InvalidInputError
from awooop.http.auth import require
from awooop.http.ingest import json_response, read_body
from awooop.ingest.credentials import check_project_id
from awooop.llm import flow_store
from awooop.llm.flow_rules import (
    Budget,
    OnExceed,
    Price,
    RateLimit,
    check_model,
    key_text,
    parse_period,
)
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}"


class BudgetBody(msgspec.Struct, forbid_unknown_fields=True):
    tokens: int | None = None
    cost: int | None = None
    period: str = "day"
    model: str | None = None
    reserve: int = 1024
    on_exceed: OnExceed = OnExceed.WAIT
    actor: str | None = None


class LimitBody(msgspec.Struct, forbid_unknown_fields=True):
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


def view(row: Budget | RateLimit | Price) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(row)
    body["key"] = key_text(row.project_id, row.model)
    if isinstance(row, Price):
        body["input_price"], body["output_price"] = float(row.input_price), float(row.output_price)
    return body


def _decode(raw: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"invalid request body: {exc}") from None


def routes(services: Services) -> list[BaseRoute]:
    limit_bytes = services.settings.http_max_body_bytes

    async def set_budget(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body: BudgetBody = _decode(await read_body(request, limit_bytes), BudgetBody)
        model, period_s = check_model(body.model), parse_period(body.period)
        made = await services.db.in_tenant(
            project_id,
            lambda conn: flow_store.set_budget(
                conn,
                project_id,
                model,
                tokens=body.tokens,
                cost=body.cost,
                period_s=period_s,
                reserve_tokens=body.reserve,
                on_exceed=body.on_exceed,
                actor=body.actor or who.actor,
            ),
        )
        return json_response(view(made), 200)

    async def set_limit(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body: LimitBody = _decode(await read_body(request, limit_bytes), LimitBody)
        model, period_s = check_model(body.model), parse_period(body.period)
        made = await services.db.in_tenant(
            project_id,
            lambda conn: flow_store.set_limit(
                conn,
                project_id,
                model,
                limit=body.limit,
                period_s=period_s,
                burst=body.burst,
                actor=body.actor or who.actor,
            ),
        )
        return json_response(view(made), 200)

    async def set_price(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body: PriceBody = _decode(await read_body(request, limit_bytes), PriceBody)
        made = await services.db.in_tenant(
            project_id,
            lambda conn: flow_store.set_price(
                conn,
                project_id,
                body.model,
                input_price=body.input,
                output_price=body.output,
                actor=body.actor or who.actor,
            ),
        )
        return json_response(view(made), 200)

    async def end(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        model = check_model(request.query_params.get("model"))
        path = request.url.path
        ender = (
            flow_store.end_budget
            if path.endswith("/budget")
            else flow_store.end_price
            if path.endswith("/price")
            else flow_store.end_limit
        )
        if path.endswith("/price") and not model:
            raise InvalidInputError("a price is ended by its model: ?model=M")
        ended: Budget | RateLimit | Price = await services.db.in_tenant(
            project_id, lambda conn: ender(conn, project_id, model, actor=who.actor)
        )
        return json_response(view(ended), 200)

    async def listing(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        history = request.query_params.get("history", "") in ("1", "true")
        if request.url.path.endswith("/budgets"):
            found: list[Any] = await services.db.in_tenant(
                project_id, lambda conn: flow_store.budgets(conn, project_id, history=history)
            )
            return json_response({"budgets": [view(b) for b in found]}, 200)
        if request.url.path.endswith("/prices"):
            found = await services.db.in_tenant(
                project_id, lambda conn: flow_store.prices(conn, project_id, history=history)
            )
            return json_response({"prices": [view(p) for p in found]}, 200)
        found = await services.db.in_tenant(
            project_id, lambda conn: flow_store.limits(conn, project_id, history=history)
        )
        return json_response({"rate_limits": [view(r) for r in found]}, 200)

    return [
        Route(PREFIX + "/budget", set_budget, methods=["POST"]),
        Route(PREFIX + "/budget", end, methods=["DELETE"]),
        Route(PREFIX + "/budgets", listing, methods=["GET"]),
        Route(PREFIX + "/rate-limit", set_limit, methods=["POST"]),
        Route(PREFIX + "/rate-limit", end, methods=["DELETE"]),
        Route(PREFIX + "/rate-limits", listing, methods=["GET"]),
        Route(PREFIX + "/price", set_price, methods=["POST"]),
        Route(PREFIX + "/price", end, methods=["DELETE"]),
        Route(PREFIX + "/prices", listing, methods=["GET"]),
    ]
