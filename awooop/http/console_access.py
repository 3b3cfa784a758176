"""What every console page and action starts from: the services, the request's session (or
the way to the login), where its reads run, and the blocked-on facts of runs."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from awooop.core.db import Connection
from awooop.core.errors import AuthenticationError, AwoooPError, TenantShareExceededError
from awooop.http import console_session as sessions
from awooop.http.console_render import error_page
from awooop.http.console_requests import form
from awooop.ingest.credentials import ADMIN_SCOPE
from awooop.runs import blocked_facts
from awooop.runs.blocked import BlockedOn
from awooop.services import Services

T = TypeVar("T")


class ConsoleAccess:
    """The base of :class:`awooop.http.console.Console`: its parts' shared state and reads."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings

    async def decide(
        self, conn: Connection, run_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, BlockedOn | None]:
        return await blocked_facts.blocked_on(
            conn, self.services.redis, self.services.keys, run_ids, self.settings.lease_ttl_s
        )

    async def session_or_login(self, request: Request) -> sessions.Session | Response:
        """A page's session, or the response that sends the browser to the login."""
        try:
            session = await sessions.current(self.services, request)
        except TenantShareExceededError as exc:
            return error_page(exc, None, request)
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse("/ui/login?" + urlencode({"next": target}), 303)
        return session

    async def posted(self, request: Request) -> tuple[sessions.Session, dict[str, str]] | Response:
        """A POST's session and its form, the CSRF token checked; or the error page that
        refuses it (a form is not replayed after a login)."""
        session = await sessions.current(self.services, request)
        if session is None:
            return error_page(AuthenticationError("log in first (/ui/login)"), None, request)
        try:
            fields = await form(request)
            sessions.check_csrf(fields.get("csrf"), session.csrf_token)
        except AwoooPError as exc:
            return error_page(exc, session, request)
        return session, fields

    async def read_in(
        self,
        session: sessions.Session,
        project: str | None,
        fn: Callable[[Connection], Awaitable[T]],
    ) -> T:
        """Reads of ``project`` (a tenant transaction), else of the session's project, or for
        an admin of every project (the platform role)."""
        db = self.services.db
        if project is not None:
            return await db.in_tenant(project, fn)
        if session.principal.scope != ADMIN_SCOPE:
            return await db.in_tenant(session.principal.project_id, fn)
        return await db.in_platform(fn)
