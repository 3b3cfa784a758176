"""Schedule routes (:mod:`awooop.schedules`).

    GET    /v1/projects/{project_id}/schedules
    POST   /v1/projects/{project_id}/schedules   {"cron", "timezone", "contract", "input",
           "catch_up"?, "catch_up_window"?, "overlap"?, "jitter"?, "actor"?}
    GET    /v1/projects/{project_id}/schedules/{schedule_id}
    PATCH  /v1/projects/{project_id}/schedules/{schedule_id}   any of the create's fields
    POST   /v1/projects/{project_id}/schedules/{schedule_id}/pause
    POST   /v1/projects/{project_id}/schedules/{schedule_id}/resume
    DELETE /v1/projects/{project_id}/schedules/{schedule_id}

Management routes (:mod:`awooop.http.auth`): a ``manage`` token of the project or an ``admin``
token for the POSTs, the PATCH and the DELETE, a ``read`` token too for the GETs; each acts in
a tenant transaction of the project in the path (another project's token: 403 E-AUTH-002; another
project's schedule: 404 E-SCHEDULE-004, as one that does not exist). The create answers 201
with the schedule as stored; a bad cron, time zone or policy is 400 E-SCHEDULE-001/002/003, a
bad contract or input 400 E-INPUT-001, a project at its bound 409 E-SCHEDULE-005, and nothing
is written; so is a PATCH, which changes only the fields it gives (the schedule keeps its id,
counters, last run and pause; when it fires at other times, its next fire time is the first
after the change). Durations are seconds or text such as ``90s``, ``5m``, ``1h``. A schedule's view
has its next fire time in its own time zone (``next_fire_local``); the single GET adds its next
five fire times (``upcoming``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.http.auth import require
from awooop.http.ingest import decode_body, json_response, read_body
from awooop.ingest.credentials import check_project_id
from awooop.schedules import rules, store
from awooop.services import Services

PREFIX = "/v1/projects/{project_id}/schedules"
ONE = PREFIX + "/{schedule_id}"
UPCOMING = 5


class ScheduleBody(msgspec.Struct, forbid_unknown_fields=True):
    cron: str
    timezone: str
    contract: str
    input: Any
    catch_up: str = rules.CatchUp.LATEST.value
    catch_up_window: int | str = rules.DEFAULT_WINDOW_S
    overlap: str = rules.Overlap.SKIP.value
    jitter: int | str = 0
    actor: str | None = None


class ScheduleChanges(msgspec.Struct, forbid_unknown_fields=True):
    cron: str | UnsetType = UNSET
    timezone: str | UnsetType = UNSET
    contract: str | UnsetType = UNSET
    input: Any = UNSET
    catch_up: str | UnsetType = UNSET
    catch_up_window: int | str | UnsetType = UNSET
    overlap: str | UnsetType = UNSET
    jitter: int | str | UnsetType = UNSET
    actor: str | None = None

    def given(self) -> dict[str, object]:
        """The changed settings by name (:data:`awooop.schedules.store.CHANGEABLE`)."""
        return {
            name: value for name in store.CHANGEABLE if (value := getattr(self, name)) is not UNSET
        }


def routes(services: Services) -> list[BaseRoute]:
    settings = services.settings
    limit = settings.http_max_body_bytes

    async def listing(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        found = await services.db.in_tenant(
            project_id, lambda conn: store.listing(conn, project_id)
        )
        return json_response([store.view(s) for s in found], 200)

    async def create(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        body = decode_body(await read_body(request, limit), ScheduleBody)
        definition = rules.define(
            cron_text=body.cron,
            timezone=body.timezone,
            contract_id=body.contract,
            input=body.input,
            catch_up=body.catch_up,
            catch_up_window=body.catch_up_window,
            overlap=body.overlap,
            jitter=body.jitter,
            min_interval_s=settings.schedule_min_interval_s,
        )
        actor = who.actor if body.actor is None else body.actor
        made = await services.db.in_tenant(
            project_id,
            lambda conn: store.create(
                conn,
                project_id,
                definition,
                actor=actor,
                now=datetime.now(UTC),
                limit=settings.schedules_per_project,
            ),
        )
        return json_response(store.view(made), 201)

    async def show(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        await require(services, request, project_id)
        schedule_id = store.parse_schedule_id(request.path_params["schedule_id"])
        found = await services.db.in_tenant(
            project_id, lambda conn: store.get(conn, project_id, schedule_id)
        )
        return json_response(store.view(found, UPCOMING), 200)

    async def update(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        schedule_id = store.parse_schedule_id(request.path_params["schedule_id"])
        body = decode_body(await read_body(request, limit), ScheduleChanges)
        actor = who.actor if body.actor is None else body.actor
        changed = await services.db.in_tenant(
            project_id,
            lambda conn: store.update(
                conn,
                project_id,
                schedule_id,
                body.given(),
                actor=actor,
                now=datetime.now(UTC),
                min_interval_s=settings.schedule_min_interval_s,
            ),
        )
        return json_response(store.view(changed, UPCOMING), 200)

    async def pause(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        schedule_id = store.parse_schedule_id(request.path_params["schedule_id"])
        paused = await services.db.in_tenant(
            project_id, lambda conn: store.pause(conn, project_id, schedule_id, actor=who.actor)
        )
        return json_response(store.view(paused), 200)

    async def resume(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        schedule_id = store.parse_schedule_id(request.path_params["schedule_id"])
        resumed = await services.db.in_tenant(
            project_id,
            lambda conn: store.resume(
                conn, project_id, schedule_id, actor=who.actor, now=datetime.now(UTC)
            ),
        )
        return json_response(store.view(resumed), 200)

    async def delete(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        who = await require(services, request, project_id)
        schedule_id = store.parse_schedule_id(request.path_params["schedule_id"])
        gone = await services.db.in_tenant(
            project_id, lambda conn: store.delete(conn, project_id, schedule_id, actor=who.actor)
        )
        return json_response(store.view(gone), 200)

    return [
        Route(PREFIX, listing, methods=["GET"]),
        Route(PREFIX, create, methods=["POST"]),
        Route(ONE, show, methods=["GET"]),
        Route(ONE, update, methods=["PATCH"]),
        Route(ONE, delete, methods=["DELETE"]),
        Route(ONE + "/pause", pause, methods=["POST"]),
        Route(ONE + "/resume", resume, methods=["POST"]),
    ]
