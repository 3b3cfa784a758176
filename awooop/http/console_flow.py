"""A project's flow control on one page: ``GET /ui/projects/{project}/flow`` (its active
pauses, concurrency limits with the busiest keys, model-call rate limits and budgets with their
usage now, and the runs waiting on them) and ``POST /ui/projects/{project}/flow/{action}``
(pause, resume), as ``awooop projects pause|resume|pauses``, ``awooop projects limits`` and
``awooop projects budget|rate-limit list`` show and do it.

Who may see and act is the management API's rule (:func:`awooop.http.auth.authorize_stored`):
a ``read`` session sees its own project's page and no form, a ``manage`` session pauses and
resumes its own project, an ``admin`` session any project; another project is 403
E-AUTH-002. Every read is one tenant transaction of the project (row-level security), each
statement bounded: at most :data:`KEYS` keys (the page says how many more), :data:`ROWS`
limits, budgets and pauses, :data:`FIRST_WAITS` waiting runs (and their count). A pause needs
a reason here (the page is the operator's switch, and the reason is what others read).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from awooop.core.db import Connection
from awooop.core.errors import AwoooPError, InvalidInputError
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_pauses import PAUSE_ACTIONS, change
from awooop.http.console_render import error_page, render
from awooop.http.console_requests import path_action
from awooop.ingest.credentials import READ_SCOPE, check_project_id
from awooop.llm import flow_store
from awooop.llm.flow_rules import Budget, RateLimit, WaitReason, key_text
from awooop.runs import concurrency, pauses
from awooop.runs.pause_rules import describe_scope

KEYS = 50  # the busiest keys shown
ROWS = 200  # pauses, limits, rate limits, budgets: far more than a project has
FIRST_WAITS = 10  # runs waiting for a model call, listed (all are counted)


def flow_path(project_id: str) -> str:
    return f"/ui/projects/{quote(project_id, safe='')}/flow"


def period_text(seconds: float) -> str:
    """Pure: ``1 s``, ``90 s``, ``1 h``, ``1 d``: the largest unit that divides the period."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:g} s"


def waiting_on(
    counts: list[flow_store.WaitCount], reason: WaitReason, row: Budget | RateLimit
) -> int:
    """Pure: the runs waiting now on the key of ``row`` for ``reason``."""
    key = key_text(row.project_id, row.model)
    return sum(c.runs for c in counts if c.reason is reason and c.wait_key == key)


async def read_flow(conn: Connection, project_id: str) -> dict[str, Any]:
    """Everything the page shows, read in one tenant transaction of the project."""
    limits = await concurrency.listing(conn, project_id, ROWS)
    scopes = {s.scope: s for s in await concurrency.scope_usage(conn, project_id)}
    keys = await concurrency.usage(conn, project_id, KEYS)
    counts, first = await flow_store.waits(conn, project_id, FIRST_WAITS)
    return {
        "paused": await pauses.listing(conn, project_id, limit=ROWS),
        "limits": [(lim, scopes.get(f"{lim.scope}:{lim.scope_key}")) for lim in limits],
        "keys": keys,
        "more_keys": max(0, sum(s.keys for s in scopes.values()) - len(keys)),
        "rate_limits": await flow_store.limits(conn, project_id, limit=ROWS),
        "budgets": await flow_store.budgets(conn, project_id, limit=ROWS),
        "wait_counts": counts,
        "waiting": sum(c.runs for c in counts),
        "first_waits": first,
    }


class FlowPages(ConsoleAccess):
    async def flow_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            project_id = check_project_id(request.path_params["project"])
            authorize_stored(session.principal, project_id, write=False)
            shown = await self.services.db.in_tenant(project_id, lambda c: read_flow(c, project_id))
        except AwoooPError as exc:
            return error_page(exc, session, request)
        page = render(
            "flow.html",
            session=session,
            project=project_id,
            action_path=flow_path(project_id),
            can_act=session.principal.scope != READ_SCOPE,
            describe=lambda p: describe_scope(p.scope, p.scope_key),
            period=period_text,
            waiting_on=lambda reason, row: waiting_on(shown["wait_counts"], reason, row),
            reasons=WaitReason,
            key_text=key_text,
            done=sessions.notice(request),
            **shown,
        )
        return sessions.notice_shown(page, request)

    async def flow_action(self, request: Request) -> Response:
        posted = await self.posted(request)
        if isinstance(posted, Response):
            return posted
        session, fields = posted
        try:
            project_id = check_project_id(request.path_params["project"])
            action = path_action(request, PAUSE_ACTIONS)
            authorize_stored(session.principal, project_id, write=True)
            if action == "pause" and not fields.get("reason", "").strip():
                raise InvalidInputError("reason: say why the flow is paused")
            done = await change(self.services, session, project_id, action, fields)
        except AwoooPError as exc:
            return error_page(exc, session, request)
        return sessions.redirect_noting(request, flow_path(project_id), done)
