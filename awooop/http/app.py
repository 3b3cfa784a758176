"""The ASGI application: routes gathered from one module per concern, JSON errors everywhere.

Each module in ROUTE_MODULES defines ``routes(services) -> list[BaseRoute]``. Every error is
JSON ``{"code": ..., "message": ...}``: catalog errors with their own status, unknown routes
404 E-HTTP-404, wrong methods 405 E-HTTP-405, anything unexpected 500 E-INTERNAL-001 (logged).
"""

from __future__ import annotations

import importlib
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from awooop.errors import AwoooPError
from awooop.logs import get_logger
from awooop.services import Services

log = get_logger(__name__)

ROUTE_MODULES = (
    "awooop.http.health",
    "awooop.http.ingest",
    "awooop.http.runs",
    "awooop.http.contracts",
    "awooop.http.approvals",
)


def error_response(exc: AwoooPError) -> JSONResponse:
    return JSONResponse(exc.to_dict(), status_code=exc.http_status)


async def _catalog_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AwoooPError)
    return error_response(exc)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse(
        {"code": f"E-HTTP-{exc.status_code}", "message": exc.detail},
        status_code=exc.status_code,
    )


async def _unexpected(_request: Request, exc: Exception) -> Response:
    log.error("http_unexpected_error", exc_info=exc)
    return JSONResponse({"code": "E-INTERNAL-001", "message": "internal error"}, status_code=500)


def create_app(services: Services, **starlette_options: Any) -> Starlette:
    routes = []
    for name in ROUTE_MODULES:
        routes.extend(importlib.import_module(name).routes(services))
    app = Starlette(
        routes=routes,
        exception_handlers={
            AwoooPError: _catalog_error,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
        **starlette_options,
    )
    app.state.services = services
    return app
