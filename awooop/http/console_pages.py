"""The console's run pages: ``/ui`` (to the list), ``/ui/runs`` (runs, filters in the URL) and
``/ui/runs/{project_id}/{run_id}`` (one run: blocked_on, state, the step it is in, its failure
with the failing step and traceback, timeline, model calls with their tokens, approvals, dead
letters)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import unquote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from awooop.core.db import Connection
from awooop.core.errors import AwoooPError, RunNotFoundError
from awooop.eventlog.deadletters import DeadLetterRow
from awooop.eventlog.state import RunState, RunStatus
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_render import error_page, filter_view, render
from awooop.http.console_requests import path_run, run_filter
from awooop.ingest.credentials import ADMIN_SCOPE, READ_SCOPE
from awooop.runs import deadletters, listing, run_rows
from awooop.runs.blocked import BlockedOn, Reason, elapsed
from projections import failures, model_calls, timeline


@dataclass(frozen=True)
class RunPage:
    """What one run's page shows, read in one tenant transaction."""

    state: RunState
    blocked: BlockedOn | None
    history: model_calls.RunHistory
    approvals: list[listing.Approval]
    dead_letters: list[DeadLetterRow]


def in_step(blocked: BlockedOn | None, now: datetime) -> tuple[str, datetime, str] | None:
    """Pure: the step a running run is in, since when and for how long, as its header shows
    it; None when no step is known."""
    if blocked is None or blocked.step is None or blocked.step_started_at is None:
        return None
    return blocked.step, blocked.step_started_at, elapsed(now, blocked.step_started_at)


class RunPages(ConsoleAccess):
    async def index(self, _request: Request) -> Response:
        return RedirectResponse("/ui/runs", 303)

    async def runs_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            now = datetime.now().astimezone()
            f = run_filter(request.query_params, session, now)
            before_text = request.query_params.get("before")
            before = None if not before_text else listing.parse_cursor(before_text)
            page = await self.read_in(
                session,
                f.project,
                lambda conn: listing.page(conn, f, self.decide, before=before),
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        params = {k: v for k, v in request.query_params.items() if k != "before" and v}
        next_url = ""
        if page.next is not None:
            next_url = "/ui/runs?" + urlencode({**params, "before": page.next.text()})
        return render(
            "runs.html",
            session=session,
            page=page,
            f=filter_view(f),
            since_text=request.query_params.get("since", ""),
            admin=session.principal.scope == ADMIN_SCOPE,
            can_act=session.principal.scope != READ_SCOPE,
            bulk_query=urlencode(params),
            statuses=[s.value for s in RunStatus],
            channels=listing.CHANNELS,
            reasons=[r.value for r in Reason],
            next_url=next_url,
            filtered=any(v for k, v in params.items() if k != "project"),
            base_url=str(request.base_url),
        )

    async def run_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            project_id, run_id = path_run(request)
            authorize_stored(session.principal, project_id, write=False)
            shown = await self.services.db.in_tenant(
                project_id, lambda conn: self.read_run(conn, project_id, run_id)
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        page = render(
            "run.html",
            session=session,
            state=shown.state,
            blocked=shown.blocked,
            timeline=shown.history.timeline,
            model_calls=shown.history.model_calls,
            steps=timeline.steps_in_run_order(shown.state.saga_steps, shown.history.timeline),
            approvals=shown.approvals,
            dead_letters=shown.dead_letters,
            in_step=in_step(shown.blocked, datetime.now(UTC)),
            failure=failures.failed_by(shown.state, shown.history.failures),
            failures=shown.history.failures,
            tokens=shown.history.tokens,
            can_act=session.principal.scope != READ_SCOPE,
            trace_url=self.settings.console_trace_url,
            done=unquote(request.cookies.get(sessions.NOTICE_COOKIE, ""))[:200],
        )
        if sessions.NOTICE_COOKIE in request.cookies:  # shown once
            page.delete_cookie(sessions.NOTICE_COOKIE, path=sessions.COOKIE_PATH)
        return page

    async def read_run(self, conn: Connection, project_id: str, run_id: uuid.UUID) -> RunPage:
        state = await run_rows.load(conn, run_id)
        if state is None:
            raise RunNotFoundError(run_id=run_id)
        return RunPage(
            state=state,
            blocked=(await self.decide(conn, [run_id])).get(run_id),
            history=await model_calls.history_from_log(conn, run_id),
            approvals=await listing.approvals_of(conn, run_id),
            dead_letters=await deadletters.entries_of_run(conn, project_id, run_id),
        )
