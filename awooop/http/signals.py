"""``POST /v1/projects/{project_id}/runs/{run_id}/signals/{name}``: send a signal to a run
(docs/workers.md, Waiting for an event).

Body ``{"payload": <JSON>, "key": "K"}`` (or the key in the ``Idempotency-Key`` header). A
management route (a token of scope ``manage`` of the project, or ``admin``). The signal is
written, and delivered at once when the run waits for it, in one tenant transaction of the
project (:func:`awooop.runs.signals.send`): 201 ``{"signal_id", "run_id", "name", "key",
"delivered", "duplicate"}``, 200 with ``duplicate`` true for a key sent before. Refusals write
nothing: E-INPUT-001 (400: a bad name, key or body), E-INPUT-003 (413: the payload is over
AWOOOP_SIGNAL_PAYLOAD_MAX_BYTES), E-RUN-003 (404: no such run in the project), E-SIGNAL-002
(409: the run has finished), E-SIGNAL-003 (429: the run keeps too many undelivered signals),
E-AUTH-001/002/003 (401/403).
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from awooop.core import metrics
from awooop.core.errors import InvalidInputError
from awooop.core.telemetry import context_metadata, tracer
from awooop.http.approvals import PREFIX, _ids
from awooop.http.auth import require
from awooop.http.ingest import decode_body, read_body
from awooop.ingest.credentials import check_project_id
from awooop.runs import signals
from awooop.services import Services


class SignalBody(msgspec.Struct, forbid_unknown_fields=True):
    payload: Any = None
    key: str | None = None


def routes(services: Services) -> list[BaseRoute]:
    settings = services.settings

    async def send(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        principal = await require(services, request, project_id)
        _, run_id = _ids(request)
        name = signals.check_name(request.path_params["name"])
        raw = await read_body(request, settings.http_max_body_bytes)
        body: SignalBody = decode_body(raw, SignalBody) if raw.strip() else SignalBody()
        key = body.key or request.headers.get("idempotency-key")
        if not key:
            raise InvalidInputError("a signal needs a key: `key` or the Idempotency-Key header")
        with tracer.start_as_current_span(
            "signal", attributes={"awooop.run_id": str(run_id), "awooop.signal": name}
        ):
            sent = await services.db.in_tenant(
                project_id,
                lambda conn: signals.send(
                    conn,
                    run_id,
                    name,
                    body.payload,
                    key=key,
                    sent_by=principal.actor,
                    payload_max_bytes=settings.signal_payload_max_bytes,
                    kept_max=settings.signals_per_run_max,
                    metadata={**principal.metadata(), **context_metadata()},
                ),
            )
        if sent.delivered and not sent.duplicate:
            metrics.SIGNALS_DELIVERED.labels("send").inc()
        return JSONResponse(msgspec.to_builtins(sent), status_code=200 if sent.duplicate else 201)

    return [Route(PREFIX + "/signals/{name}", send, methods=["POST"])]
