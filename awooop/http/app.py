"""The ASGI application: routes gathered from one module per concern, JSON errors everywhere.

Each module in ROUTE_MODULES defines ``routes(services) -> list[BaseRoute]``. Every error is
JSON ``{"code": ..., "message": ...}``: catalog errors with their own status, unknown routes
404 E-HTTP-404, wrong methods 405 E-HTTP-405, the database away, refusing (read-only, a revoked
privilege, disk full) or too slow 503 E-DB-001/E-DB-002/E-DB-003 with ``Retry-After``, anything
unexpected 500 E-INTERNAL-001 (logged).

A trailing ``/`` is ignored: ``/healthz/`` is ``/healthz`` (webhook URLs are typed by people, and
providers do not follow redirects). A client that goes away before its request is read
(Starlette's ``ClientDisconnect``) is one info line, ``http_client_disconnected``, and no
answer: nobody is there to read it. When the server's body timeout closed the request
(:mod:`awooop.http.server`), that timeout's own line is the only one. A client that goes away
while its request is being served cancels it, and management and console requests are bounded
and counted per project (:mod:`awooop.http.capacity`).
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, ExceptionHandler, Receive, Scope, Send

from awooop.core.errors import AwoooPError, http_error_code
from awooop.core.logs import get_logger
from awooop.core.retries import (
    CONFLICT_ERRORS,
    CONNECTION_ERRORS,
    refused_by_policy,
    unavailable,
)
from awooop.http.capacity import RequestBounds
from awooop.http.server import READ_TIMEOUT_MARK
from awooop.services import Services

log = get_logger(__name__)

ROUTE_MODULES = (
    "awooop.http.health",
    "awooop.http.ingest",
    "awooop.http.runs",
    "awooop.http.output",
    "awooop.http.contracts",
    "awooop.http.approvals",
    "awooop.http.signals",
    "awooop.http.pauses",
    "awooop.http.limits",
    "awooop.http.shares",
    "awooop.http.versions",
    "awooop.http.schedules",
    "awooop.http.llm_flow",
    "awooop.http.openapi",
    "awooop.http.console",
)


def retry_after(exc: AwoooPError) -> dict[str, str]:
    """The ``Retry-After`` header an error asks for (none for most)."""
    return {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}


def error_response(exc: AwoooPError) -> JSONResponse:
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=retry_after(exc))


async def _catalog_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AwoooPError)
    return error_response(exc)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse(
        {"code": http_error_code(exc.status_code), "message": exc.detail},
        status_code=exc.status_code,
    )


async def _database_unavailable(request: Request, exc: Exception) -> Response:
    """The database away, refusing or too slow (a deadlock or a serialisation failure that
    outlasted the route's retries included), wherever a route met it: a typed 503 with
    Retry-After and one log line. Registered per class (not under ``Exception``, whose handler
    Starlette's error middleware follows with a re-raise and a traceback in the server log).
    A row-level security refusal is no outage but a bug: 500, logged with its traceback."""
    if refused_by_policy(exc):
        return await _unexpected(request, exc)
    typed = unavailable(exc, "the database")
    log.warning(
        "http_database_unavailable",
        path=request.url.path[:200],
        code=typed.code,
        error=repr(exc)[:500],
    )
    return error_response(typed)


async def _unexpected(_request: Request, exc: Exception) -> Response:
    log.error("http_unexpected_error", exc_info=exc)
    return JSONResponse({"code": AwoooPError.code, "message": "internal error"}, status_code=500)


async def _client_gone(request: Request, _exc: Exception) -> None:
    if READ_TIMEOUT_MARK not in request.scope:
        log.info("http_client_disconnected", method=request.method, path=request.url.path[:200])


class IgnoreTrailingSlash:
    """Serve ``/path/`` as ``/path`` (the scope is changed in place: the server's marks on it
    stay visible to the handlers)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and len(path) > 1 and path.endswith("/"):
            scope["path"] = path.rstrip("/") or "/"
            raw = scope.get("raw_path")
            if raw:
                scope["raw_path"] = raw.rstrip(b"/") or b"/"
        await self.app(scope, receive, send)


def create_app(services: Services, **starlette_options: Any) -> Starlette:
    routes = []
    for name in ROUTE_MODULES:
        routes.extend(importlib.import_module(name).routes(services))
    app = Starlette(
        routes=routes,
        exception_handlers={
            AwoooPError: _catalog_error,
            HTTPException: _http_error,
            # Returns no response: Starlette then sends nothing (typed as a Response handler).
            ClientDisconnect: cast(ExceptionHandler, _client_gone),
            **dict.fromkeys(CONNECTION_ERRORS + CONFLICT_ERRORS, _database_unavailable),
            Exception: _unexpected,
        },
        middleware=[
            Middleware(IgnoreTrailingSlash),
            Middleware(
                RequestBounds,
                statement_timeout_s=services.settings.http_statement_timeout_s,
                tenant_requests=services.settings.http_tenant_requests,
            ),
        ],
        **starlette_options,
    )
    app.router.redirect_slashes = False  # served above instead of a 307 without a code
    app.state.services = services
    return app
