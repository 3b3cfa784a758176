"""``GET /openapi.json``: an OpenAPI 3.1 document of the HTTP API, for clients in any language.

The document is built from code wherever the code knows the answer:

- paths and methods, operation ids, summaries, access and query parameters: the operation rows
  (:mod:`awooop.http.openapi_operations`, :mod:`awooop.http.openapi_settings`), which
  ``tests/unit/test_openapi.py`` holds equal to the app's routes, both ways;
- request bodies: the msgspec Structs the routes decode (``msgspec.json.schema_components``),
  so a field added to a Struct is in the document; the answers that are exactly one type's JSON
  the same way;
- path parameters from the path (``{run_id}``), described once (:data:`PATH_PARAMS`), their
  patterns from the checks the routes run (the project id's, the channels the server has);
- the error responses from the catalog classes (:mod:`awooop.core.errors`): their status and
  code from the class, their meaning from its docstring, every one with the schema of
  :class:`Error` (``{"code", "message", "details"?}``, what every refusal answers). The errors
  every route of an access answers (:func:`common_errors`) are added to each row's own.

The document is public (no token: it describes the routes, nobody's data). It is built once per
process, on its first request, and served as the same bytes after.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import (
    AuthenticationError,
    AwoooPError,
    DatabaseBusyError,
    DatabaseRefusedError,
    DatabaseUnavailableError,
    InvalidInputError,
    PayloadTooLargeError,
    ProjectForbiddenError,
    ReadOnlyError,
    ScopeForbiddenError,
    TenantShareExceededError,
    http_error_code,
)
from awooop.core.telemetry import package_version
from awooop.http import openapi_operations as rows
from awooop.http import openapi_settings as settings_rows
from awooop.http.openapi_operations import EXCLUDED_PREFIX, JSON, PATH_PARAMS, Access, Op, Param
from awooop.services import Services

PATH = "/openapi.json"
VERSION = "3.1.0"
REF = "#/components/schemas/{name}"
ERROR_REF = {"$ref": REF.format(name="Error")}
STRING = {"type": "string"}
PATH_NAME = re.compile(r"{(\w+)}")

# Tag (the route module's concern) -> its operations, in the order the document lists them.
SECTIONS: Mapping[str, tuple[Op, ...]] = {
    "health": rows.HEALTH,
    "ingest": rows.INGEST,
    "runs": rows.RUNS,
    "output": rows.OUTPUT,
    "approvals": rows.APPROVALS,
    "signals": rows.SIGNALS,
    "pauses": settings_rows.PAUSES,
    "limits": settings_rows.LIMITS,
    "shares": settings_rows.SHARES,
    "versions": settings_rows.VERSIONS,
    "schedules": settings_rows.SCHEDULES,
    "llm_flow": settings_rows.FLOW,
    "contracts": settings_rows.CONTRACTS,
}
OPERATIONS: tuple[Op, ...] = tuple(
    op._replace(tag=tag) for tag, ops in SECTIONS.items() for op in ops
)

DATABASE_ERRORS = (DatabaseUnavailableError, DatabaseRefusedError, DatabaseBusyError)
TOKEN_ERRORS = (
    InvalidInputError,
    AuthenticationError,
    ProjectForbiddenError,
    ScopeForbiddenError,
    TenantShareExceededError,
)
RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before trying again",
        "schema": {"type": "integer"},
    }
}
DESCRIPTION = f"""The HTTP API of an AwoooP server: ingest, runs and their output, approvals,
signals and a project's settings. The server serves this document at `{PATH}`.

Every error answers JSON `{{"code", "message"}}` (`details` sometimes): the codes are the
catalog's (docs/reference.md); an unknown path is 404 `{http_error_code(404)}`, a method a route
does not serve 405 `{http_error_code(405)}`. Every `GET` route also answers `HEAD`; a trailing
`/` is ignored.

Management routes take `Authorization: Bearer <token>` of a project (`awooop tokens create
PROJECT --scope read|manage`) or an admin token (`awooop tokens create __platform__ --scope
admin`); an operation's security names the least role it needs: `read` (GET routes), `manage`
(changes), `admin`. The ingest route takes the channel's credentials.

Not described here: the run console under `{EXCLUDED_PREFIX}` (HTML pages, forms, their scripts
and the run page's output stream, over a session cookie: docs/console.md)."""
BEARER = {
    "type": "http",
    "scheme": "bearer",
    "description": "A token `awp_...`: a project's `read` or `manage` token, an `admin` token "
    "(every project), or an ingest token of the `api` channel.",
}


class Error(msgspec.Struct):
    """Every refusal: its code in the error catalog and what went wrong."""

    code: str
    message: str
    details: dict[str, str] | msgspec.UnsetType = msgspec.UNSET


def common_errors(access: Access, body: Any) -> tuple[type[AwoooPError], ...]:
    """Pure: the errors every route of ``access`` answers (and those of reading a body)."""
    if access is Access.PUBLIC:
        return ()
    found: tuple[type[AwoooPError], ...] = DATABASE_ERRORS
    if access is Access.INGEST:
        found += (InvalidInputError, AuthenticationError)
    else:
        found += TOKEN_ERRORS + (() if access is Access.READ else (ReadOnlyError,))
    return found + (() if body is None else (PayloadTooLargeError,))


def meaning(error: type[AwoooPError]) -> str:
    return f"`{error.code}`: " + " ".join((error.__doc__ or "").split())


def error_responses(errors: tuple[type[AwoooPError], ...]) -> dict[str, Any]:
    """Pure: one response per status, naming each code it may carry."""
    by_status: dict[int, dict[str, type[AwoooPError]]] = {}
    for error in errors:
        by_status.setdefault(error.http_status, {}).setdefault(error.code, error)
    out: dict[str, Any] = {}
    for status, codes in sorted(by_status.items()):
        out[str(status)] = {
            "description": "\n".join(f"- {meaning(e)}" for e in codes.values()),
            "content": {JSON: {"schema": ERROR_REF}},
            **({"headers": RETRY_AFTER} if status in (429, 503) else {}),
        }
    return out


def parameter(p: Param, where: str) -> dict[str, Any]:
    return {
        "name": p.name,
        "in": where,
        "description": p.description,
        "required": p.required,
        "schema": dict(p.schema),
    }


def parameters(op: Op) -> list[dict[str, Any]]:
    """The path's parameters (each described once in :data:`PATH_PARAMS`), then the row's."""
    return [
        *(parameter(PATH_PARAMS[name], "path") for name in PATH_NAME.findall(op.path)),
        *(parameter(p, "query") for p in op.query),
        *(parameter(p, "header") for p in op.headers),
    ]


def body_required(op: Op) -> bool:
    """A Struct's body may be left out when none of its fields is required (the routes read
    no body as ``{}``); any other body is required."""
    if isinstance(op.body, type) and issubclass(op.body, msgspec.Struct):
        return any(f.required for f in msgspec.structs.fields(op.body))
    return True


def operation(op: Op, schema_of: Mapping[Any, Any]) -> dict[str, Any]:
    """Pure: one operation of the document."""
    ok = op.ok or {200: op.summary}
    responses: dict[str, Any] = {
        str(status): {
            "description": text,
            "content": {
                m: {"schema": schema_of[op.answer] if m == JSON else STRING} for m in op.media
            },
        }
        for status, text in ok.items()
    }
    responses.update(error_responses(common_errors(op.access, op.body) + op.errors))
    responses["default"] = {
        "description": f"any other error, such as `{AwoooPError.code}` (500)",
        "content": {JSON: {"schema": ERROR_REF}},
    }
    out: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "security": security(op.access),
        "parameters": parameters(op),
        "responses": responses,
    }
    if op.body is not None:
        out["requestBody"] = {
            "required": body_required(op),
            "content": {JSON: {"schema": schema_of[op.body]}},
        }
    return out


def security(access: Access) -> list[dict[str, list[str]]]:
    """Pure: who may call, as OpenAPI security requirements (the role the token needs)."""
    if access is Access.PUBLIC:
        return []
    if access is Access.INGEST:  # the api channel's token, or a provider's own secret
        return [{"bearer": [access.value]}, {}]
    return [{"bearer": [access.value]}]


def document() -> dict[str, Any]:
    """Pure: the OpenAPI document of :data:`OPERATIONS`."""
    kinds = [Error, *(op.body for op in OPERATIONS if op.body is not None)]
    types = list(dict.fromkeys([*kinds, *(op.answer for op in OPERATIONS)]))
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    schema_of = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = operation(op, schema_of)
    return {
        "openapi": VERSION,
        "info": {
            "title": "AwoooP HTTP API",
            "version": package_version(),
            "description": DESCRIPTION,
        },
        "tags": [{"name": tag} for tag in SECTIONS],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {"bearer": BEARER}},
    }


@functools.cache
def document_bytes() -> bytes:
    """The document as served: built on the first request, the same bytes after."""
    return msgspec.json.encode(document())


async def serve(_request: Request) -> Response:
    return Response(document_bytes(), media_type=JSON)


def routes(_services: Services) -> list[BaseRoute]:
    return [Route(PATH, serve, methods=["GET"])]
