"""The console's lists beside the runs: ``/ui/dead-letters`` (the open dead letters,
:mod:`awooop.runs.deadletter_list`; each redriven through the run action ``redrive``) and
``/ui/operations`` (the bulk operations, :mod:`awooop.runs.operation_list`).

Both are held to the session's project (another project in the URL is 403 E-AUTH-002, as on
the run list), or for an admin to the project the URL names, else every project (the platform
role). Both page newest first with the run list's keyset cursor (``before``)."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from awooop.core.errors import AwoooPError
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_render import error_page, render
from awooop.ingest.credentials import ADMIN_SCOPE, READ_SCOPE, check_project_id
from awooop.runs import deadletter_list, listing, operation_list
from awooop.runs.blocked import DEAD_LETTER_CODES


def held_project(session: sessions.Session, project: str | None) -> str | None:
    """The project a list reads: a project token's own (another one is refused), an admin's
    choice (None: every project)."""
    principal = session.principal
    if principal.scope != ADMIN_SCOPE:
        authorize_stored(principal, project, write=False)
        return principal.project_id
    return None if project is None else check_project_id(project)


def cursor_of(request: Request) -> listing.Cursor | None:
    text = request.query_params.get("before")
    return None if not text else listing.parse_cursor(text)


def next_link(request: Request, path: str, cursor: listing.Cursor | None) -> str:
    """The URL of the next page: the same filters, ``before`` the cursor ("" without one)."""
    if cursor is None:
        return ""
    params = {k: v for k, v in request.query_params.items() if k != "before" and v}
    return f"{path}?" + urlencode({**params, "before": cursor.text()})


class ListPages(ConsoleAccess):
    async def dead_letters_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            f = deadletter_list.parse_filter(request.query_params, datetime.now().astimezone())
            f = msgspec.structs.replace(f, project=held_project(session, f.project))
            before = cursor_of(request)
            size = deadletter_list.PAGE
            page = await self.read_in(
                session, f.project, lambda conn: deadletter_list.page(conn, f, before, size)
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        return render(
            "deadletters.html",
            session=session,
            page=page,
            f=f,
            since_text=request.query_params.get("since", ""),
            admin=session.principal.scope == ADMIN_SCOPE,
            can_act=session.principal.scope != READ_SCOPE,
            channels=listing.CHANNELS,
            codes=sorted(DEAD_LETTER_CODES),
            next_url=next_link(request, "/ui/dead-letters", page.next),
            filtered=any(request.query_params.get(k) for k in ("channel", "code", "since")),
        )

    async def operations_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            project = held_project(session, request.query_params.get("project") or None)
            before = cursor_of(request)
            size = operation_list.PAGE
            page = await self.read_in(
                session, project, lambda conn: operation_list.page(conn, project, before, size)
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        return render(
            "operations.html",
            session=session,
            page=page,
            project=project,
            admin=session.principal.scope == ADMIN_SCOPE,
            next_url=next_link(request, "/ui/operations", page.next),
        )
