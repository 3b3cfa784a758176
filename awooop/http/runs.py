"""``GET /v1/projects/{project_id}/runs/{run_id}``: a run's current state and its model calls,
tenant-scoped; ``GET /v1/projects/{project_id}/runs``: the project's runs, a page at a time.

The list takes the console list's filters as query parameters (``status``, ``channel``,
``blocked_on``, ``since``, ``q``, ``search``, ``exclude_codes``: :mod:`awooop.runs.listing`),
``limit`` (1 to 200, default 50) and ``before`` (the ``next`` of the previous page), and answers
``{"runs": [...], "next": ..., "capped": ...}``, newest created first, each run with its
``blocked_on``. A bad parameter is 400 E-INPUT-001 (for example a search under 3 characters).

A management route: the caller shows a bearer token with scope ``manage`` of the project or
``admin`` (:mod:`awooop.http.auth`; 401 E-AUTH-001 / 403 E-AUTH-002, E-AUTH-003). The run is
read in a tenant transaction of the project in the path: row-level security hides every other
project's rows, so another project's run is 404 E-RUN-003 exactly like a run that does not
exist. ``model_calls`` lists the calls the run made through ``run.llm``, each with the model
and the policy revision that served it (:mod:`awooop.projections.model_calls`, the same read of the
run's stream as the console's run page). The run changing routes (approve, reject, cancel,
retry) are in :mod:`awooop.http.approvals`.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError, RunNotFoundError
from awooop.eventlog.state import RunState
from awooop.http.auth import require
from awooop.http.ingest import json_response
from awooop.ingest.credentials import check_project_id
from awooop.projections import model_calls
from awooop.runs import blocked_facts, listing, run_rows
from awooop.runs.blocked import BlockedOn
from awooop.schedules import rules
from awooop.services import Services

MAX_PAGE = 200


def run_body(state: RunState) -> dict[str, object]:
    """The run's state; for a run a schedule started, ``schedule``: its schedule and fire
    time."""
    body: dict[str, object] = msgspec.to_builtins(state)
    scheduled = rules.scheduled_by(state.provider_event_id)
    if scheduled is not None:
        body["schedule"] = scheduled
    return body


def routes(services: Services) -> list[BaseRoute]:
    async def get_run(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        try:
            run_id = uuid.UUID(request.path_params["run_id"])
        except ValueError:
            raise RunNotFoundError(run_id=request.path_params["run_id"][:64]) from None

        async def read(conn: Connection) -> tuple[RunState | None, list[model_calls.ModelCallLine]]:
            state = await run_rows.load(conn, run_id)
            if state is None:
                return None, []
            return state, (await model_calls.history_from_log(conn, run_id)).model_calls

        state, calls = await services.db.in_tenant(project_id, read)
        if state is None:
            raise RunNotFoundError(run_id=run_id)
        body = run_body(state)
        body["model_calls"] = msgspec.to_builtins(calls)
        return json_response(body, 200)

    async def list_runs(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        query = request.query_params
        fields = {k: v for k, v in query.items() if k in listing.FILTER_KEYS}
        f = listing.parse_filter({**fields, "project": project_id}, datetime.now().astimezone())
        before = listing.parse_cursor(query["before"]) if query.get("before") else None
        size = page_size(query.get("limit", ""))

        async def decide(
            conn: Connection, run_ids: list[uuid.UUID]
        ) -> dict[uuid.UUID, BlockedOn | None]:
            return await blocked_facts.blocked_on(
                conn, services.redis, services.keys, run_ids, services.settings.lease_ttl_s
            )

        page = await services.db.in_tenant(
            project_id, lambda conn: listing.page(conn, f, decide, before=before, size=size)
        )
        runs = [
            {**msgspec.to_builtins(row), "blocked_on": msgspec.to_builtins(blocked)}
            for row, blocked in page.rows
        ]
        body = {
            "runs": runs,
            "next": None if page.next is None else page.next.text(),
            "capped": page.capped,
        }
        return json_response(body, 200)

    return [
        Route("/v1/projects/{project_id}/runs", list_runs, methods=["GET"]),
        Route("/v1/projects/{project_id}/runs/{run_id}", get_run, methods=["GET"]),
    ]


def page_size(text: str) -> int:
    """Pure: the list's ``limit`` (default :data:`listing.PAGE`, at most :data:`MAX_PAGE`)."""
    if not text:
        return listing.PAGE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise InvalidInputError(f"limit {text[:20]!r}: a number from 1 to {MAX_PAGE}")
    return int(text)
