"""The request body schemas of ``/openapi.json`` are what the routes accept, on real Postgres.

For a few routes, the schema is read from the served document (fetched without a token) and
bodies are built from it alone, beside a sample value per field name: a body of the required
fields only is accepted, and so is one that also gives every field with a default at that
default; a body missing any one required field, or with a field the schema does not allow, is
400 ``E-INPUT-001`` and writes nothing (the route's own listing shows no change).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from tests.support.http import app_client

P = "proj-a"


class Case(NamedTuple):
    method: str
    path: str  # as the document names it
    samples: dict[str, Any]  # a valid value of each required field, by name
    accepted: int  # the success status
    listing: str  # a GET route showing what was written
    rows: Callable[[Any], int]  # how many rows that listing shows


CASES = [
    Case(
        "POST",
        "/v1/projects/{project_id}/schedules",
        {"cron": "30 2 * * *", "timezone": "Europe/Madrid", "contract": "nightly", "input": {}},
        201,
        "/v1/projects/{project_id}/schedules",
        len,
    ),
    Case(
        "POST",
        "/v1/projects/{project_id}/price",
        {"model": "model-a", "input": "0.25", "output": "1.5"},
        200,
        "/v1/projects/{project_id}/prices?history=1",
        lambda body: len(body["prices"]),
    ),
    Case(
        "PUT",
        "/v1/projects/{project_id}/versions/{contract_id}",
        {"versions": ["1.4.0"]},
        200,
        "/v1/projects/{project_id}/versions",
        len,
    ),
]


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


def body_schema(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    """The request body's schema of that operation, its ``$ref`` followed."""
    body = document["paths"][path][method.lower()]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"]
    schema: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return schema


def filled(path: str) -> str:
    return path.format(project_id=P, contract_id="triage")


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.method} {c.path}")
async def test_a_body_built_from_the_schema_is_what_the_route_accepts(
    client: httpx.AsyncClient, db: Database, case: Case
) -> None:
    _, token = await credentials.create_management_token(db, P, "manage")
    auth = {"Authorization": f"Bearer {token}"}
    served = await client.get("/openapi.json")
    assert served.status_code == 200
    schema = body_schema(served.json(), case.method, case.path)
    required = schema["required"]
    assert required, "a case needs a body with a required field"
    minimal = {name: case.samples[name] for name in required}
    url = filled(case.path)

    async def send(body: dict[str, Any]) -> httpx.Response:
        return await client.request(case.method, url, json=body, headers=auth)

    async def rows() -> int:
        listed = await client.get(filled(case.listing), headers=auth)
        assert listed.status_code == 200, listed.text
        return case.rows(listed.json())

    made = await send(minimal)
    assert made.status_code == case.accepted, made.text
    written = await rows()
    assert written >= 1

    refused = [{k: v for k, v in minimal.items() if k != name} for name in required]
    if schema.get("additionalProperties") is False:
        assert "not_a_field" not in schema["properties"]
        refused.append({**minimal, "not_a_field": 1})
    for body in refused:
        answer = await send(body)
        assert (answer.status_code, answer.json()["code"]) == (400, "E-INPUT-001"), body
        assert answer.json()["message"]
    assert await rows() == written

    defaults = {
        name: prop["default"] for name, prop in schema["properties"].items() if "default" in prop
    }
    assert defaults, "a case needs a body with a field that has a default"
    again = await send({**minimal, **defaults})
    assert again.status_code == case.accepted, again.text
