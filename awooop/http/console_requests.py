"""What a console request carries: its form, the run or action in its path, the list's
filters, and where to go after the login."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

import msgspec
from starlette.datastructures import QueryParams
from starlette.requests import Request

from awooop.core.errors import InvalidInputError, PayloadTooLargeError, RunNotFoundError
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored
from awooop.ingest.credentials import ADMIN_SCOPE, check_project_id
from awooop.runs import listing

FORM_LIMIT = 16 * 1024


async def form(request: Request) -> dict[str, str]:
    """The url-encoded form of a POST (first value of each field)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_LIMIT:
            raise PayloadTooLargeError(f"a console form is at most {FORM_LIMIT} bytes")
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


def run_filter(
    fields: Mapping[str, str], session: sessions.Session, now: datetime
) -> listing.RunFilter:
    """The list's filters from the URL (or a form); a project token is held to its project.
    Failure codes to leave out come as one comma-separated field or as one per checkbox."""
    if isinstance(fields, QueryParams) and len(fields.getlist("exclude_codes")) > 1:
        fields = {**fields, "exclude_codes": ",".join(fields.getlist("exclude_codes"))}
    f = listing.parse_filter(fields, now)
    principal = session.principal
    if principal.scope != ADMIN_SCOPE:
        authorize_stored(principal, f.project, write=False)
        return msgspec.structs.replace(f, project=principal.project_id)
    if f.project is not None:
        check_project_id(f.project)
    return f


def safe_next(target: str) -> str:
    """Pure: only a console path is a place to go after login (no open redirect)."""
    return target if target.startswith("/ui") and "//" not in target else "/ui/runs"


def came_from(request: Request) -> str:
    """Where an error page's link goes back to: the console page the browser came from (its
    ``Referer``, same host, through :func:`safe_next`), else the run list; never the page that
    failed itself."""
    referer = urlsplit(request.headers.get("referer", ""))
    if referer.netloc != request.url.netloc:
        return "/ui/runs"
    target = safe_next(referer.path + (f"?{referer.query}" if referer.query else ""))
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return "/ui/runs" if target == here and request.method == "GET" else target


def path_run(request: Request) -> tuple[str, uuid.UUID]:
    project_id = check_project_id(request.path_params["project_id"])
    try:
        return project_id, uuid.UUID(request.path_params["run_id"])
    except ValueError:
        raise RunNotFoundError(run_id=request.path_params["run_id"][:64]) from None


def path_action(request: Request, actions: Collection[str]) -> str:
    """The action a POST's path names, one of ``actions`` (else 400 E-INPUT-001)."""
    action: str = request.path_params["action"]
    if action not in actions:
        raise InvalidInputError(f"unknown action {action[:40]!r}")
    return action
