"""Authorisation of the management routes: a bearer token with a management scope.

Every route under ``/v1/projects/{project_id}/runs/...``, ``.../contracts...`` and the
pause routes (``.../pause``, ``.../resume``, ``.../pauses``) and the concurrency limit
routes (``.../limits``) call
:func:`require` before it reads the body or touches a row:

- no ``Authorization: Bearer awp_...`` header, a malformed token, an unknown or revoked one:
  401 E-AUTH-001;
- a live token whose scope is not a management scope (an ``ingest`` token of a channel):
  403 E-AUTH-003;
- a ``manage`` or ``read`` token of another project: 403 E-AUTH-002;
- a ``read`` token of the project on a route that changes something (every POST): 403
  E-AUTH-004; on a GET route: allowed;
- a ``manage`` token of the project in the path, or an ``admin`` token (they belong to the
  platform project ``__platform__``): allowed, within the token's project's share of
  concurrent requests (429 E-HTTP-429 beyond it, :mod:`awooop.http.capacity`).

The console (:mod:`awooop.http.console_session`) authorises its pages with the same
:func:`authorize_stored`, from the token row its session cookie points to.

Tokens are created with ``awooop tokens create PROJECT --scope manage`` and
``awooop tokens create __platform__ --scope admin``. The lookup reads the token row by its id on
the platform role, because an admin token is not a row of the project in the path (row-level
security would hide it). The caller's identity, :attr:`Principal.actor`
(``<scope>-token:<token_id>``), goes into the metadata of every event the request writes.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request

from awooop.core.db import Connection
from awooop.core.errors import (
    AuthenticationError,
    ProjectForbiddenError,
    ReadOnlyError,
    ScopeForbiddenError,
)
from awooop.http.capacity import take_share
from awooop.http.ingest import lowercase_headers
from awooop.ingest.auth import equal, hash_secret, parse_token, presented_token
from awooop.ingest.common import Headers
from awooop.ingest.credentials import ADMIN_SCOPE, MANAGE_SCOPE, READ_SCOPE
from awooop.services import Services

# --- SQL -------------------------------------------------------------------------------------

LOOKUP = """
SELECT project_id, scope, token_hash FROM awooop_api_tokens
WHERE token_id = $1 AND revoked_at IS NULL
"""

TOKEN_FAILED = "authentication failed: unknown or revoked bearer token"  # noqa: S105 - a message


class StoredToken(msgspec.Struct, frozen=True):
    project_id: str
    scope: str
    token_hash: str


class Principal(msgspec.Struct, frozen=True):
    """Who a management request acts as."""

    token_id: str
    project_id: str
    scope: str

    @property
    def actor(self) -> str:
        return f"{self.scope}-token:{self.token_id}"

    def metadata(self) -> dict[str, Any]:
        """The event metadata that records this caller."""
        return {"actor": self.actor}


# --- pure ------------------------------------------------------------------------------------


def authorize(
    headers: Headers, stored: StoredToken | None, project_id: str, *, write: bool = True
) -> Principal:
    """The principal of the request's bearer token for ``project_id``, or a refusal.

    ``stored`` is the live row of the token id the header names (None: no such live token);
    ``write``: the route changes something (a read token is refused)."""
    token = presented_token(headers)
    if token is None:
        raise AuthenticationError(
            "missing bearer token (Authorization: Bearer awp_...): the management routes need "
            "a token with scope manage or admin"
        )
    parsed = parse_token(token)
    if parsed is None:
        raise AuthenticationError("malformed bearer token")
    if stored is None or not equal(hash_secret(parsed[1]), stored.token_hash):
        raise AuthenticationError(TOKEN_FAILED)
    principal = Principal(token_id=parsed[0], project_id=stored.project_id, scope=stored.scope)
    return authorize_stored(principal, project_id, write=write)


def authorize_stored(principal: Principal, project_id: str | None, *, write: bool) -> Principal:
    """Pure: ``principal`` (a live token) may act on ``project_id`` (None: some project of its
    own, as the console's run list), writing or not; else the refusal."""
    if principal.scope == ADMIN_SCOPE:
        return principal
    if principal.scope not in (MANAGE_SCOPE, READ_SCOPE):
        raise ScopeForbiddenError(
            f"a token with scope {principal.scope} cannot use the management routes "
            f"(awooop tokens create PROJECT --scope {MANAGE_SCOPE})"
        )
    if project_id is not None and principal.project_id != project_id:
        raise ProjectForbiddenError(
            f"this management token belongs to project {principal.project_id}, not {project_id}"
        )
    if write and principal.scope == READ_SCOPE:
        raise ReadOnlyError(
            "a read token sees the project and changes nothing "
            f"(awooop tokens create {principal.project_id} --scope {MANAGE_SCOPE})"
        )
    return principal


# --- I/O -------------------------------------------------------------------------------------


async def lookup(conn: Connection, headers: Headers) -> StoredToken | None:
    token = presented_token(headers)
    parsed = None if token is None else parse_token(token)
    if parsed is None:
        return None
    row = await conn.fetchrow(LOOKUP, parsed[0])
    return None if row is None else StoredToken(**dict(row.items()))


async def require(services: Services, request: Request, project_id: str) -> Principal:
    """Authorise ``request`` for ``project_id`` (see the module docstring) or raise."""
    headers = lowercase_headers(request)
    stored = await services.db.in_platform(lambda conn: lookup(conn, headers))
    principal = authorize(headers, stored, project_id, write=request.method not in ("GET", "HEAD"))
    take_share(request, principal.project_id)
    return principal
