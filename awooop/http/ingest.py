"""``POST /v1/projects/{project_id}/channels/{channel_type}``: provider webhooks become runs.

Order of checks, each refusal a JSON error with a code and nothing written:
unknown channel 404 E-CHANNEL-001; bad project or contract id 400 E-INPUT-001; body over
AWOOOP_HTTP_MAX_BODY_BYTES 413 E-INPUT-003 (counted while reading, Content-Length is only a
shortcut); then, in :class:`awooop.ingest.service.Ingestor` (the flow, its metrics and its log
lines), on a connection whose session carries the project
(:class:`awooop.core.sessions.TenantSessions`): authentication 401 E-AUTH-001, parsing 400
E-INPUT-001 / 422 E-INPUT-002 / 403 E-INGEST-004 (an event older than the channel's bound,
LINE), and the ingest itself, one atomic statement (:mod:`awooop.ingest.ingest_write`) shared with
the deliveries for the same project, channel and contract that arrive while the previous statement
runs (group commit, :mod:`awooop.core.batching`; docs/ingest.md). When that statement fails for
anything but the database being away, each delivery of the batch is written alone: one
delivery's data that Postgres refuses is 422 E-DATA-001 for that delivery only, and nothing of
it is written.

Answers: 202 ``{"run_ids": [...], "results": [...]}`` when the delivery created at least
one run; 200 with ``"code": "E-IDEMPOTENT-001"`` and the existing ``run_id`` when every event
was seen before (LINE: one result per event, each ``created`` or ``duplicate``); 200 with
empty lists for a delivery with no events (LINE's webhook verification). ``?contract_id=``
names the agent contract (default ``default``).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import DuplicateEvent, InvalidInputError, PayloadTooLargeError
from awooop.core.sessions import TenantSessions
from awooop.ingest import ingest_write
from awooop.ingest.service import Ingestor
from awooop.services import Services

T = TypeVar("T")
_encode = msgspec.json.Encoder().encode
DUPLICATE_MESSAGE = (DuplicateEvent.__doc__ or "").strip()


def json_response(body: Any, status_code: int) -> Response:
    return Response(_encode(body), status_code=status_code, media_type="application/json")


def lowercase_headers(request: Request) -> dict[str, str]:
    """Header values as UTF-8 text; bytes that are not UTF-8 stay as lone surrogates
    (``surrogateescape``), which :func:`awooop.ingest.common.event_id` refuses and
    :func:`awooop.ingest.auth.equal` compares byte for byte."""
    return {
        k.decode("latin-1").lower(): v.decode("utf-8", "surrogateescape")
        for k, v in request.headers.raw
    }


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it grows past ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(limit=limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


def decode_body(raw: bytes, kind: type[T]) -> T:
    """A management route's JSON body as ``kind`` (an empty body: ``{}``); anything else is
    400 E-INPUT-001 saying why."""
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"invalid request body: {exc}") from None


def answer(outcomes: list[ingest_write.Outcome]) -> Response:
    results = [
        {"provider_event_id": o.provider_event_id, "run_id": o.run_id, "status": "created"}
        if o.created
        else {
            "provider_event_id": o.provider_event_id,
            "run_id": o.run_id,
            "status": "duplicate",
            "code": DuplicateEvent.code,
        }
        for o in outcomes
    ]
    run_ids = [o.run_id for o in outcomes]
    if any(o.created for o in outcomes) or not outcomes:
        return json_response(
            {"run_ids": run_ids, "results": results},
            202 if outcomes else DuplicateEvent.http_status,
        )
    return json_response(
        {
            "code": DuplicateEvent.code,
            "message": DUPLICATE_MESSAGE,
            "run_id": run_ids[0],
            "run_ids": run_ids,
            "results": results,
        },
        DuplicateEvent.http_status,
    )


def routes(services: Services) -> list[BaseRoute]:
    settings = services.settings
    sessions = TenantSessions(
        settings.database_url, settings.http_db_pool_size, bound_s=settings.ingest_timeout_s
    )
    services.closers.append(sessions.close)
    ingestor = Ingestor(settings, sessions)

    async def post_channel(request: Request) -> Response:
        outcomes = await ingestor.receive(
            request.path_params["channel_type"],
            request.path_params["project_id"],
            request.query_params.get("contract_id", ingest_write.DEFAULT_CONTRACT),
            lowercase_headers(request),
            lambda: read_body(request, settings.http_max_body_bytes),
            gone=(ClientDisconnect,),
        )
        return answer(outcomes)

    return [
        Route("/v1/projects/{project_id}/channels/{channel_type}", post_channel, methods=["POST"]),
    ]
