"""Console sessions: a browser logs in once with a management token, then carries a cookie.

- **Login** (``POST /ui/login``): the form posts a token with scope ``read``, ``manage`` or
  ``admin`` (checked as the bearer routes check it, :mod:`awooop.http.auth`); the server
  stores a session row (``awooop_console_sessions``, migration 0110: the SHA-256 of a random
  256-bit secret, the token id, a CSRF token, an expiry of ``AWOOOP_CONSOLE_SESSION_S``) and
  sets the cookie ``awooop_console`` to the secret: ``HttpOnly`` (no script reads it),
  ``SameSite=Strict`` (no other site's page sends it), ``Path=/ui``, ``Secure`` on https.
- **Every request** reads the session joined with its token row: an expired session, a
  revoked token or an unknown cookie is no session (the page sends the browser to the login);
  revoking a token ends its sessions at once. A live session's request counts against its
  token's project's share of concurrent requests (:mod:`awooop.http.capacity`).
- **CSRF**: every form carries the session's CSRF token (synchronizer-token pattern) and every
  POST compares it in constant time before anything else (403 E-AUTH-005). The login form,
  which has no session yet, uses a double-submit cookie (``awooop_console_login``) instead.

Sessions are read and written on the platform role by their key (like token rows); expired
rows are deleted at each login (the expiry index keeps that one range scan).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from urllib.parse import quote, unquote

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from awooop.core.db import Connection
from awooop.core.errors import AuthenticationError, CsrfError
from awooop.http.auth import LOOKUP, Principal, StoredToken, authorize_stored
from awooop.http.capacity import take_share
from awooop.ingest.auth import equal, hash_secret, parse_token
from awooop.ingest.credentials import MANAGEMENT_SCOPES
from awooop.services import Services

COOKIE = "awooop_console"
LOGIN_COOKIE = "awooop_console_login"
COOKIE_PATH = "/ui"
# What an action did, shown once on the page it redirects to (so no notice stays in a URL).
NOTICE_COOKIE = "awooop_console_notice"
NOTICE_S = 60
# The name a person last decided an approval under: the approval forms start with it.
NAME_COOKIE = "awooop_console_name"
NAME_S = 90 * 24 * 3600

# --- SQL -------------------------------------------------------------------------------------
SESSION = """
SELECT s.csrf_token, t.token_id, t.project_id, t.scope
FROM awooop_console_sessions s
JOIN awooop_api_tokens t ON t.token_id = s.token_id AND t.revoked_at IS NULL
WHERE s.session_hash = $1 AND s.expires_at > now()
"""
INSERT = """
INSERT INTO awooop_console_sessions (session_hash, token_id, csrf_token, expires_at)
VALUES ($1, $2, $3, now() + $4::interval)
"""
EXPIRE = "DELETE FROM awooop_console_sessions WHERE expires_at <= now()"
DELETE = "DELETE FROM awooop_console_sessions WHERE session_hash = $1"
# ---------------------------------------------------------------------------------------------


class Session(msgspec.Struct, frozen=True):
    principal: Principal
    csrf_token: str


def new_login_csrf() -> str:
    """The login form's double-submit value (cookie and hidden field)."""
    return secrets.token_urlsafe(24)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_csrf(presented: str | None, expected: str) -> None:
    """Pure: refuse a form whose CSRF token is missing or wrong (constant-time compare)."""
    if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise CsrfError


def login_principal(token: str, stored: StoredToken | None) -> Principal:
    """Pure: the principal a login token gives, or E-AUTH-001 / E-AUTH-003."""
    parsed = parse_token(token.strip())
    if parsed is None or stored is None or not equal(hash_secret(parsed[1]), stored.token_hash):
        raise AuthenticationError("unknown, revoked or malformed token")
    principal = Principal(token_id=parsed[0], project_id=stored.project_id, scope=stored.scope)
    if principal.scope not in MANAGEMENT_SCOPES:
        authorize_stored(principal, None, write=False)  # raises the scope refusal
    return principal


async def login(services: Services, token: str) -> tuple[str, Session]:
    """Check ``token`` and open a session: (the cookie's secret, the session)."""
    parsed = parse_token(token.strip())

    async def read(conn: Connection) -> StoredToken | None:
        if parsed is None:
            return None
        row = await conn.fetchrow(LOOKUP, parsed[0])
        return None if row is None else StoredToken(**dict(row.items()))

    principal = login_principal(token, await services.db.in_platform(read))
    secret, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    ttl = timedelta(seconds=services.settings.console_session_s)

    async def write(conn: Connection) -> None:
        await conn.execute(EXPIRE)
        await conn.execute(INSERT, _digest(secret), principal.token_id, csrf, ttl)

    await services.db.in_platform_writes(write)
    return secret, Session(principal=principal, csrf_token=csrf)


async def current(services: Services, request: Request) -> Session | None:
    """The request's live session, None without one."""
    secret = request.cookies.get(COOKIE)
    if not secret or len(secret) > 200:
        return None

    async def read(conn: Connection) -> Session | None:
        row = await conn.fetchrow(SESSION, _digest(secret))
        if row is None:
            return None
        principal = Principal(
            token_id=row["token_id"], project_id=row["project_id"], scope=row["scope"]
        )
        return Session(principal=principal, csrf_token=row["csrf_token"])

    session = await services.db.in_platform(read)
    if session is not None:
        take_share(request, session.principal.project_id)  # E-HTTP-429 beyond the share
    return session


async def logout(services: Services, request: Request) -> None:
    secret = request.cookies.get(COOKIE)
    if secret:
        digest = _digest(secret)
        await services.db.in_platform_writes(lambda conn: conn.execute(DELETE, digest))


def set_cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def notice(request: Request) -> str:
    """What the action that redirected here did (the notice cookie; '' for none)."""
    return unquote(request.cookies.get(NOTICE_COOKIE, ""))[:200]


def notice_shown(page: Response, request: Request) -> Response:
    """``page`` showed the notice: it is shown once (the cookie is deleted)."""
    if NOTICE_COOKIE in request.cookies:
        page.delete_cookie(NOTICE_COOKIE, path=COOKIE_PATH)
    return page


def redirect_noting(request: Request, target: str, done: str) -> RedirectResponse:
    """After an action: to ``target`` (303), which shows ``done`` once (:func:`notice`)."""
    response = RedirectResponse(target, 303)
    set_cookie(response, request, NOTICE_COOKIE, quote(done[:200]), NOTICE_S)
    return response
