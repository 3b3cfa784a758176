"""``/openapi.json`` describes the app's routes, all of them and no others, as valid OpenAPI 3.1.

The app is built as ``awooop serve`` builds it (every module of ROUTE_MODULES) on services that
open nothing. Its routes, walked through every Mount, are compared with the document both ways
(same paths, same methods; ``HEAD``, which Starlette adds to every ``GET``, aside), so a route
added without its operation row fails here, and so does a row whose route is gone. The one
exclusion is the console (every path under ``/ui``), and the routes it leaves out are exactly
the console's own and the console's copy of the output stream. The request bodies' schemas are
checked against what the routes accept in tests/integration/test_openapi_bodies.py.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator, Iterable, Iterator

import httpx
import msgspec
import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route

from awooop.core.config import load_settings
from awooop.http import console, openapi
from awooop.http.app import ROUTE_MODULES, create_app
from awooop.http.openapi_operations import EXCLUDED_PREFIX, Access
from awooop.services import Services
from awooop.streams.keys import Keys

CONSOLE_OUTPUT = ("GET", "/ui/runs/{project_id}/{run_id}/output")  # awooop.http.output's copy


def offline_services() -> Services:
    """Services whose clients are never opened: building the routes touches none of them."""
    settings = load_settings(environ={})
    return Services(
        settings=settings,
        db=None,  # type: ignore[arg-type]
        redis=None,
        keys=Keys(settings.redis_key_prefix, settings.shard_count),
    )


@pytest.fixture
async def app() -> AsyncIterator[Starlette]:
    services = offline_services()
    yield create_app(services)
    for close in reversed(services.closers):
        await close()


def served(routes: Iterable[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route, through every Mount; the HEAD Starlette adds to a GET
    route left out (a HEAD-only route would stay, and fail the comparison)."""
    for route in routes:
        if isinstance(route, Mount):
            yield from served(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            methods = route.methods or set()
            for method in methods - ({"HEAD"} if "GET" in methods else set()):
                yield method, prefix + route.path
        else:
            raise AssertionError(f"a route of a kind this test does not compare: {route!r}")


def excluded(path: str) -> bool:
    return path == EXCLUDED_PREFIX or path.startswith(EXCLUDED_PREFIX + "/")


def documented(document: dict[str, object]) -> set[tuple[str, str]]:
    paths = document["paths"]
    assert isinstance(paths, dict)
    return {(method.upper(), path) for path, item in paths.items() for method in item}


def test_every_route_but_the_consoles_is_documented_and_nothing_else(app: Starlette) -> None:
    routes = list(served(app.routes))
    assert len(routes) == len(set(routes)), "a method and path served twice"
    api = {r for r in routes if not excluded(r[1])}
    doc = documented(openapi.document())
    assert sorted(api - doc) == [], "routes without an operation row (awooop/http/openapi_*.py)"
    assert sorted(doc - api) == [], "operation rows without a route"
    assert ("GET", openapi.PATH) in doc
    assert ("POST", "/v1/projects/{project_id}/channels/{channel_type}") in doc


def test_the_routes_left_out_are_exactly_the_consoles(app: Starlette) -> None:
    left_out = {r for r in served(app.routes) if excluded(r[1])}
    console_routes = set(served(console.routes(offline_services())))
    assert console_routes and all(excluded(path) for _, path in console_routes)
    assert left_out == console_routes | {CONSOLE_OUTPUT}
    assert not any(excluded(path) for _, path in documented(openapi.document()))


def test_the_document_is_valid_openapi_3_1() -> None:
    document = openapi.document()
    assert document["openapi"].startswith("3.1")
    validate(document, cls=OpenAPIV31SpecValidator)
    # What the validator reads is what is served: the JSON, not the Python objects.
    validate(json.loads(openapi.document_bytes()), cls=OpenAPIV31SpecValidator)


def test_each_operation_has_its_parts() -> None:
    document = openapi.document()
    for op in openapi.OPERATIONS:
        item = document["paths"][op.path][op.method.lower()]
        responses = item["responses"]
        ok = {str(status) for status in op.ok or {200: ""}}
        assert ok <= set(responses) and any(s.startswith("2") for s in ok), op.operation_id
        # no success shares its status with an error the operation lists (it would hide it)
        errors = {str(e.http_status) for e in openapi.common_errors(op.access, op.body) + op.errors}
        assert not ok & errors, op.operation_id
        if op.access is Access.PUBLIC:
            assert item["security"] == []
        else:
            assert {"bearer": [op.access.value]} in item["security"]
            for status in ("401", "503"):
                assert responses[status]["content"]["application/json"]["schema"] == (
                    openapi.ERROR_REF
                ), (op.operation_id, status)
        if op.body is not None:
            assert "schema" in item["requestBody"]["content"]["application/json"]
            assert "413" in responses, op.operation_id


def test_request_bodies_are_the_routes_structs() -> None:
    """Every Struct a route module defines is an operation's body, and its schema is the
    body's: a field of the Struct is a property, required exactly when the Struct requires
    it."""
    document = openapi.document()
    components = document["components"]["schemas"]
    bodies = set()
    for op in openapi.OPERATIONS:
        if not (isinstance(op.body, type) and issubclass(op.body, msgspec.Struct)):
            continue
        bodies.add(op.body)
        content = document["paths"][op.path][op.method.lower()]["requestBody"]["content"]
        schema = components[content["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]]
        fields = msgspec.structs.fields(op.body)
        assert set(schema["properties"]) == {f.encode_name for f in fields}, op.operation_id
        assert set(schema["required"]) == {f.encode_name for f in fields if f.required}
    defined = {
        value
        for module in map(importlib.import_module, ROUTE_MODULES)
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__module__ == module.__name__
    }
    assert bodies and defined - {openapi.Error} == bodies
    # each component is named by its class alone: no two Structs share a name (the generated
    # clients' type names would be module paths)
    assert all("." not in name for name in components), sorted(components)
    error = components["Error"]
    assert set(error["required"]) == {"code", "message"}


async def test_the_document_is_served_without_a_token(app: Starlette) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        answer = await http.get(openapi.PATH)
        again = await http.get(openapi.PATH + "/")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == json.loads(json.dumps(openapi.document()))
    assert again.content == answer.content
    assert openapi.document_bytes() is openapi.document_bytes()  # built once
