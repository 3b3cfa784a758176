"""The console's run pages: ``/ui`` (to the list), ``/ui/runs`` (runs, filters in the URL) and
``/ui/runs/{project_id}/{run_id}`` (one run: blocked_on, state, the step it is in, its streamed
output (live: :mod:`awooop.http.console_output`), its failure with the failing step and
traceback, timeline, model calls with their tokens, approvals, dead letters)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import unquote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from awooop.core.db import Connection
from awooop.core.durations import elapsed
from awooop.core.errors import AwoooPError, RunNotFoundError
from awooop.eventlog.deadletters import DeadLetterRow
from awooop.eventlog.state import TERMINAL, RunState, RunStatus
from awooop.http import console_live as live
from awooop.http import console_output, console_timeline
from awooop.http import console_session as sessions
from awooop.http.auth import authorize_stored
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_render import SECURITY_HEADERS, error_page, filter_view, render
from awooop.http.console_requests import path_run, run_filter
from awooop.http.console_waterfall import duration_text, waterfall
from awooop.ingest.credentials import ADMIN_SCOPE, READ_SCOPE
from awooop.projections import failures, model_calls, timeline
from awooop.runs import approval_reviews, children, deadletters, listing, output_log, run_rows
from awooop.runs.blocked import BlockedOn, Reason
from awooop.runs.output_rules import Page


@dataclass(frozen=True)
class RunPage:
    """What one run's page shows, read in one tenant transaction."""

    state: RunState
    blocked: BlockedOn | None
    history: model_calls.RunHistory
    approvals: list[listing.Approval]
    dead_letters: list[DeadLetterRow]
    output: Page | None  # the run's first chunks of streamed output (console_output.py)
    now: datetime  # the database clock
    etag: str
    family: children.Family | None = None  # its parent and children (child runs)


@dataclass(frozen=True)
class Unchanged:
    """The run page the browser has is still the page (``If-None-Match``)."""

    etag: str


def in_step(blocked: BlockedOn | None, now: datetime) -> tuple[str, datetime, str] | None:
    """Pure: the step a running run is in, since when and for how long, as its header shows
    it; None when no step is known."""
    found = running_step(blocked)
    if found is None:
        return None
    return found[0], found[1], elapsed(now, found[1])


def running_step(blocked: BlockedOn | None) -> tuple[str, datetime] | None:
    """Pure: the step a running run reported and its start, for the waterfall."""
    if blocked is None or blocked.step is None or blocked.step_started_at is None:
        return None
    return blocked.step, blocked.step_started_at


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
        answer = render(
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
            live_ms=int(self.settings.console_live_s * live.LIST_FACTOR * 1000),
            live_script=live.SCRIPT_PATH,
        )
        etag = live.body_etag(bytes(answer.body))
        if live.matches(request, etag):
            return live.not_modified(etag, SECURITY_HEADERS)
        answer.headers["etag"] = etag
        return answer

    async def run_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            project_id, run_id = path_run(request)
            authorize_stored(session.principal, project_id, write=False)
            selected = console_timeline.event_filter(request.query_params.getlist("events"))
            context = live.page_context(request, session)
            shown = await self.services.db.in_tenant(
                project_id,
                lambda conn: self.read_run(conn, project_id, run_id, request, context),
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        if isinstance(shown, Unchanged):
            return live.not_modified(shown.etag, SECURITY_HEADERS)
        lines = shown.history.timeline
        final = shown.state.status in TERMINAL
        page = render(
            "run.html",
            session=session,
            state=shown.state,
            blocked=shown.blocked,
            timeline=lines,
            model_calls=shown.history.model_calls,
            steps=timeline.steps_in_run_order(shown.state.saga_steps, lines),
            approvals=shown.approvals,
            dead_letters=shown.dead_letters,
            output=console_output.output_view(shown.output),
            output_script=console_output.SCRIPT_PATH,
            family=shown.family,
            in_step=in_step(shown.blocked, datetime.now(UTC)),
            failure=failures.failed_by(shown.state, shown.history.failures),
            failures=shown.history.failures,
            tokens=shown.history.tokens,
            can_act=session.principal.scope != READ_SCOPE,
            trace_url=self.settings.console_trace_url,
            done=sessions.notice(request),
            view=console_timeline.view(lines, selected),
            waterfall=waterfall(
                lines, shown.now, finished=final, in_step=running_step(shown.blocked)
            ),
            when_ms=console_timeline.when_ms,
            fold_at=console_timeline.FOLD_AT,
            duration_text=duration_text,
            final=final,
            etag=shown.etag,
            live_ms=int(self.settings.console_live_s * 1000),
            live_script=live.SCRIPT_PATH,
            path=request.url.path,
            by_name=unquote(request.cookies.get(sessions.NAME_COOKIE, ""))[:200],
        )
        page.headers["etag"] = shown.etag
        return sessions.notice_shown(page, request)

    async def read_run(
        self,
        conn: Connection,
        project_id: str,
        run_id: uuid.UUID,
        request: Request,
        context: str,
    ) -> RunPage | Unchanged:
        """The run's page, or :class:`Unchanged` when the browser has it already: decided on
        the run's version (one primary-key read) before its stream is read."""
        found = await run_rows.version_of(conn, run_id)
        if found is None:
            raise RunNotFoundError(run_id=run_id)
        version, status, now = found
        final = RunStatus(status) in TERMINAL
        # A finished parent's page changes while its children finish (their count is in the tag).
        context = f"{context}|{await children.pending_count(conn, run_id)}"
        etag = live.run_etag(version, status, now, final=final, context=context)
        if live.matches(request, etag):
            return Unchanged(etag)
        state = await run_rows.load(conn, run_id)
        if state is None:
            raise RunNotFoundError(run_id=run_id)
        return RunPage(
            state=state,
            blocked=(await self.decide(conn, [run_id])).get(run_id),
            history=await model_calls.history_from_log(conn, run_id),
            approvals=await approval_reviews.reviews_of(conn, run_id),
            dead_letters=await deadletters.entries_of_run(conn, project_id, run_id),
            output=await output_log.page(conn, run_id, 0, console_output.PAGE_ROWS),
            family=await children.family(conn, run_id, state.parent_run_id),
            now=now,
            etag=live.run_etag(
                state.version,
                state.status.value,
                now,
                final=state.status in TERMINAL,
                context=context,
            ),
        )
