"""The console's pause switch: ``GET /ui/pauses`` (the active pauses and their history, a form
to pause) and ``POST /ui/pauses/{action}`` (pause, resume), done through the same functions as
``awooop projects`` and the pause routes (:mod:`awooop.runs.pauses`).

Who may see and act is the management API's rule (:func:`awooop.http.auth.authorize_stored`):
a ``read`` session sees its project's pauses and no form, a ``manage`` session pauses and
resumes its own project, an ``admin`` session names the project. Every change runs in a
tenant transaction of the project and records the token as who paused or resumed (the person
the form names, when it names one).
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from awooop.core.errors import AwoooPError, InvalidInputError
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_render import error_page, render
from awooop.http.console_requests import path_action
from awooop.ingest.credentials import ADMIN_SCOPE, READ_SCOPE, check_project_id
from awooop.runs import pauses
from awooop.runs.pause_rules import Scope, describe_scope, scope_of
from awooop.services import Services

PAUSE_ACTIONS = ("pause", "resume")
HISTORY = 50  # resumed pauses shown under the active ones


def form_scope(fields: dict[str, str]) -> tuple[Scope, str]:
    """Pure: the scope a form names (``scope``: project, channel or contract; ``key``)."""
    kind = fields.get("scope", "project").strip() or "project"
    key = fields.get("key", "").strip()
    if kind == Scope.PROJECT.value:
        return scope_of()
    if kind == Scope.CHANNEL.value:
        return scope_of(channel=key)
    if kind == Scope.CONTRACT.value:
        return scope_of(contract=key)
    raise InvalidInputError(f"unknown scope {kind[:40]!r}")


async def change(
    services: Services,
    session: sessions.Session,
    project_id: str,
    action: str,
    fields: dict[str, str],
) -> str:
    """Pause or resume the scope ``fields`` name, in a tenant transaction of the project, as
    the session's token (or the person the form names); what the page says after. The pause
    and flow pages both act through it."""
    principal = authorize_stored(session.principal, project_id, write=True)
    scope, key = form_scope(fields)
    person = fields.get("actor", "").strip() or principal.actor
    what = f"{describe_scope(scope, key)} of {project_id}"
    if action == "pause":
        _, created = await services.db.in_tenant(
            project_id,
            lambda c: pauses.pause(
                c, project_id, scope, key, reason=fields.get("reason", ""), actor=person
            ),
        )
        return f"{what} paused" if created else f"{what} was already paused"
    await services.db.in_tenant(
        project_id, lambda c: pauses.resume(c, project_id, scope, key, actor=person)
    )
    return f"{what} resumed"


class PausePages(ConsoleAccess):
    async def pauses_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        admin = session.principal.scope == ADMIN_SCOPE
        try:
            project = request.query_params.get("project") or None
            if project is not None:
                project = check_project_id(project)
                authorize_stored(session.principal, project, write=False)
            shown = project if (project or admin) else session.principal.project_id
            listed = await self.read_in(
                session, project, lambda c: pauses.listing(c, shown, history=True, limit=HISTORY)
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        page = render(
            "pauses.html",
            session=session,
            active=[p for p in listed if p.active],
            resumed=[p for p in listed if not p.active],
            describe=lambda p: describe_scope(p.scope, p.scope_key),
            admin=admin,
            project=shown or "",
            can_act=session.principal.scope != READ_SCOPE,
            done=sessions.notice(request),
        )
        return sessions.notice_shown(page, request)

    async def pause_action(self, request: Request) -> Response:
        posted = await self.posted(request)
        if isinstance(posted, Response):
            return posted
        session, fields = posted
        try:
            action = path_action(request, PAUSE_ACTIONS)
            project_id = check_project_id(
                fields.get("project", "").strip() or session.principal.project_id
            )
            done = await change(self.services, session, project_id, action, fields)
        except AwoooPError as exc:
            return error_page(exc, session, request)
        return sessions.redirect_noting(request, f"/ui/pauses?project={quote(project_id)}", done)
