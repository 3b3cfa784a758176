"""Contract revision management routes under ``/v1/projects/{project_id}/contracts``.

- ``GET  /v1/projects/{p}/contracts``: every contract (active revision, revision count);
- ``GET  .../contracts/{family}/{contract_id}``: the active revision id and every revision;
- ``POST .../contracts/{family}/{contract_id}/revisions`` ``{"body": {...}}``: 201, the revision;
- ``GET  .../contracts/{family}/{contract_id}/revisions/{revision_id}``: the revision with body;
- ``POST .../contracts/{family}/{contract_id}/activate``
  ``{"revision_id": ..., "expected_revision_id"?: ...}``: the activation;
- ``POST .../contracts/{family}/{contract_id}/rollback``
  ``{"to_revision_id"?: ..., "expected_revision_id"?: ...}``: the activation.

``expected_revision_id`` is the optimistic check: present (a revision id, or null for "no
active revision yet"), a different current revision answers 409 E-REVISION-002; absent, the
activation applies to whatever is current. Handlers are thin (authorise, parse, call
:class:`awooop.revisions.service.Revisions`, render); each is a plain ``async (Request) ->
Response``.

Every route is a management route (:mod:`awooop.http.auth`): a bearer token with scope
``manage`` of the project or ``admin`` (401 E-AUTH-001, 403 E-AUTH-002 / E-AUTH-003 otherwise,
checked before the body is read). The token's identity (``<scope>-token:<token_id>``) is the
actor of the revision events (in their metadata and in ``RevisionActivated.actor``).
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import RevisionNotFoundError
from awooop.http import ingest
from awooop.http.auth import Principal, require
from awooop.revisions.records import ANY, Activation, Expected
from awooop.revisions.service import Revisions
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}/contracts"
CONTRACT = PREFIX + "/{family}/{contract_id}"

T = TypeVar("T")


class CreateRequest(msgspec.Struct, forbid_unknown_fields=True):
    body: dict[str, Any]


class ActivateRequest(msgspec.Struct, forbid_unknown_fields=True):
    revision_id: uuid.UUID
    expected_revision_id: uuid.UUID | msgspec.UnsetType | None = msgspec.UNSET


class RollbackRequest(msgspec.Struct, forbid_unknown_fields=True):
    to_revision_id: uuid.UUID | None = None
    expected_revision_id: uuid.UUID | msgspec.UnsetType | None = msgspec.UNSET


def json_response(content: Any, status_code: int = 200) -> Response:
    return ingest.json_response(content, status_code)


async def read_json(request: Request, kind: type[T], limit: int) -> T:
    """The body as ``kind``: 413 past ``limit``, 400 E-INPUT-001 when it is not one."""
    return ingest.decode_body(await ingest.read_body(request, limit), kind)


def _expected(value: uuid.UUID | msgspec.UnsetType | None) -> Expected:
    return ANY if value is msgspec.UNSET else value


def _revision_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise RevisionNotFoundError(revision_id=text) from None


def _activation(activation: Activation) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(activation)
    return out


def routes(services: Services) -> list[BaseRoute]:
    revisions = Revisions(services.db)
    limit = services.settings.http_max_body_bytes

    async def path(request: Request) -> tuple[str, str, str, Principal]:
        p = request.path_params
        principal = await require(services, request, p["project_id"])
        return p["project_id"], p["family"], p["contract_id"], principal

    async def list_contracts(request: Request) -> Response:
        project_id = request.path_params["project_id"]
        await require(services, request, project_id)
        return json_response({"contracts": await revisions.contracts(project_id)})

    async def show_contract(request: Request) -> Response:
        project_id, family, contract_id, _who = await path(request)
        listed = await revisions.revisions(project_id, family, contract_id)
        active = next((r.revision_id for r in listed if r.active), None)
        return json_response(
            {
                "project_id": project_id,
                "contract_family": family,
                "contract_id": contract_id,
                "active_revision_id": active,
                "revisions": listed,
            }
        )

    async def create_revision(request: Request) -> Response:
        project_id, family, contract_id, who = await path(request)
        payload = await read_json(request, CreateRequest, limit)
        revision = await revisions.create(project_id, family, contract_id, payload.body, who.actor)
        return json_response(revision, status_code=201)

    async def show_revision(request: Request) -> Response:
        project_id, family, contract_id, _who = await path(request)
        revision_id = _revision_id(request.path_params["revision_id"])
        revision = await revisions.get(project_id, revision_id)
        if (revision.contract_family, revision.contract_id) != (family, contract_id):
            raise RevisionNotFoundError(revision_id=revision_id)
        return json_response(revision)

    async def activate(request: Request) -> Response:
        project_id, family, contract_id, who = await path(request)
        payload = await read_json(request, ActivateRequest, limit)
        activation = await revisions.activate(
            project_id,
            family,
            contract_id,
            payload.revision_id,
            expected=_expected(payload.expected_revision_id),
            actor=who.actor,
        )
        return json_response(_activation(activation))

    async def rollback(request: Request) -> Response:
        project_id, family, contract_id, who = await path(request)
        payload = await read_json(request, RollbackRequest, limit)
        activation = await revisions.rollback(
            project_id,
            family,
            contract_id,
            to_revision_id=payload.to_revision_id,
            expected=_expected(payload.expected_revision_id),
            actor=who.actor,
        )
        return json_response(_activation(activation))

    return [
        Route(PREFIX, list_contracts, methods=["GET"]),
        Route(CONTRACT + "/revisions/{revision_id}", show_revision, methods=["GET"]),
        Route(CONTRACT + "/revisions", create_revision, methods=["POST"]),
        Route(CONTRACT + "/activate", activate, methods=["POST"]),
        Route(CONTRACT + "/rollback", rollback, methods=["POST"]),
        Route(CONTRACT, show_contract, methods=["GET"]),
    ]
