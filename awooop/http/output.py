"""A run's streamed output (``run.emit_output``), read live or at once.

| route | what |
|---|---|
| ``GET /v1/projects/{project_id}/runs/{run_id}/output`` | server-sent events (bearer token) |
| ``GET ...?format=json`` (or ``Accept: application/json``) | one page of chunks as JSON |
| ``GET /ui/runs/{project_id}/{run_id}/output`` | the same events for the console's run page |

The events (each ``data`` one line of JSON):

- ``output``, ``id`` = the chunk's ``seq``: ``{"seq", "attempt", "offset", "end", "text",
  "at"}``, in order, each once. A client that reconnects with ``Last-Event-ID`` (or
  ``?after=SEQ``) gets the chunks after it.
- ``abandoned``: ``{"attempt": N, "by": M}``: attempt N's output was abandoned and the run went
  on in attempt M (which runs the handler from the top and emits again). Told once, as soon as
  it is known (a chunk of M, or the run's attempt count); a client that resumes right after it
  may be told it again.
- ``truncated``, ``id`` = its ``seq``: ``{"seq", "attempt", "offset"}``: the run's output
  reached ``AWOOOP_OUTPUT_MAX_BYTES`` here; nothing follows it.
- ``end``: ``{"status": "COMPLETED" | "FAILED" | "CANCELLED", "attempt": N}`` once the run is
  finished and every chunk was sent; then the stream closes (an EventSource should close on
  it, or it reconnects and gets ``end`` again).
- ``error``: ``{"code", "message"}``: a read failed (the database away or busy); the stream
  closes, the client reconnects with ``Last-Event-ID``.

A stream also ends, without ``end``, after ``AWOOOP_OUTPUT_STREAM_MAX_S``: reconnect with
``Last-Event-ID``. The caps and bounds: :mod:`awooop.http.output_streams`.

The JSON read answers ``{"run_id", "status", "attempt", "final", "chunks": [...], "next",
"more"}``: at most ``limit`` chunks (1 to 256, default 64) after ``after`` (default 0), each
with ``abandoned`` (its attempt is not the run's latest: the run went on without it); ``next``
is the ``after`` of the next page, ``more`` whether chunks after this page exist now, ``final``
whether the run is finished (with ``more`` false: the output is complete).

Who may read: a ``read``, ``manage`` or ``admin`` token of the project (the console: a
session), as every GET route (:mod:`awooop.http.auth`); reads run in a tenant transaction of
the project in the path, so another project's run is 404 ``E-RUN-003``.
"""

from __future__ import annotations

import uuid

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import AuthenticationError, InvalidInputError, RunNotFoundError
from awooop.eventlog.state import TERMINAL
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored, require
from awooop.http.capacity import release_share
from awooop.http.console_requests import path_run
from awooop.http.ingest import json_response
from awooop.http.output_streams import OutputReaders
from awooop.http.sse import EventStream
from awooop.ingest.credentials import check_project_id
from awooop.runs import output_log
from awooop.runs.output_rules import Page, resume_after
from awooop.services import Services


def wants_json(request: Request) -> bool:
    """Pure: ``?format=json`` (or ``sse``), else by ``Accept``: JSON only when it asks for
    JSON and not for ``text/event-stream``."""
    chosen = request.query_params.get("format")
    if chosen is not None:
        if chosen not in ("json", "sse"):
            raise InvalidInputError(f"format {chosen[:20]!r}: json or sse")
        return chosen == "json"
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/event-stream" not in accept


def page_limit(text: str | None) -> int:
    if text is None or text == "":
        return output_log.PAGE_ROWS
    if not text.isdigit() or not 1 <= int(text) <= output_log.MAX_PAGE_ROWS:
        raise InvalidInputError(
            f"limit {text[:20]!r}: a number from 1 to {output_log.MAX_PAGE_ROWS}"
        )
    return int(text)


def page_body(run_id: uuid.UUID, page: Page, after: int) -> dict[str, object]:
    """Pure: the JSON read's answer."""
    chunks = [{**msgspec.to_builtins(c), "abandoned": c.attempt < page.attempt} for c in page.rows]
    return {
        "run_id": str(run_id),
        "status": page.status.value,
        "attempt": page.attempt,
        "final": page.status in TERMINAL,
        "chunks": chunks,
        "next": page.rows[-1].seq if page.rows else after,
        "more": page.more,
    }


class OutputRoutes:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.readers = OutputReaders(services)
        services.closers.append(self.readers.close)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/projects/{project_id}/runs/{run_id}/output", self.api, methods=["GET"]),
            Route("/ui/runs/{project_id}/{run_id}/output", self.console, methods=["GET"]),
        ]

    async def api(self, request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(self.services, request, project_id)
        return await self.answer(request)

    async def console(self, request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        session = await sessions.current(self.services, request)
        if session is None:
            raise AuthenticationError("log in first (/ui/login)")
        authorize_stored(session.principal, project_id, write=False)
        return await self.answer(request)

    async def answer(self, request: Request) -> Response:
        project_id, run_id = path_run(request)
        after = resume_after(
            request.headers.get("last-event-id"), request.query_params.get("after")
        )
        if request.method == "HEAD" or wants_json(request):  # a HEAD opens no stream
            limit = page_limit(request.query_params.get("limit"))
            found = await self.readers.read(project_id, run_id, after, limit)
            if found is None:
                raise RunNotFoundError(run_id=run_id)
            return json_response(page_body(run_id, found, after), 200)
        stream = await self.readers.open(project_id, run_id, after)
        if stream is None:
            raise RunNotFoundError(run_id=run_id)
        release_share(request)  # the stream counts against the output caps instead
        return EventStream(stream.events(), stream.close)


def routes(services: Services) -> list[BaseRoute]:
    return OutputRoutes(services).routes()
