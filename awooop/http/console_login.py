"""The console's login and logout (``/ui/login``, ``/ui/logout``) over its sessions
(:mod:`awooop.http.console_session`: the cookie, the CSRF tokens, the session rows)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from awooop.core.errors import AwoooPError, CsrfError
from awooop.http import console_session as sessions
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_render import error_page, render
from awooop.http.console_requests import form, safe_next

LOGIN_FORM_S = 600  # how long the login form's double-submit cookie lives


class LoginRoutes(ConsoleAccess):
    async def login_page(self, request: Request) -> Response:
        nxt = safe_next(request.query_params.get("next", "/ui/runs"))
        return self.login_form(request, nxt, error=None)

    def login_form(
        self, request: Request, nxt: str, *, error: str | None, status: int = 200
    ) -> Response:
        token = sessions.new_login_csrf()
        page = render("login.html", status, login_csrf=token, next=nxt, error=error)
        sessions.set_cookie(page, request, sessions.LOGIN_COOKIE, token, LOGIN_FORM_S)
        return page

    async def login(self, request: Request) -> Response:
        fields = await form(request)
        nxt = safe_next(fields.get("next", "/ui/runs"))
        try:
            sessions.check_csrf(fields.get("csrf"), request.cookies.get(sessions.LOGIN_COOKIE, ""))
            secret, _session = await sessions.login(self.services, fields.get("token", ""))
        except AwoooPError as exc:
            return self.login_form(request, nxt, error=exc.message, status=exc.http_status)
        response = RedirectResponse(nxt, 303)
        sessions.set_cookie(
            response, request, sessions.COOKIE, secret, int(self.settings.console_session_s)
        )
        response.delete_cookie(sessions.LOGIN_COOKIE, path=sessions.COOKIE_PATH)
        return response

    async def logout(self, request: Request) -> Response:
        session = await sessions.current(self.services, request)
        fields = await form(request)
        if session is not None:
            try:
                sessions.check_csrf(fields.get("csrf"), session.csrf_token)
            except CsrfError as exc:
                return error_page(exc, session, request)
            await sessions.logout(self.services, request)
        response = RedirectResponse("/ui/login", 303)
        response.delete_cookie(sessions.COOKIE, path=sessions.COOKIE_PATH)
        return response
