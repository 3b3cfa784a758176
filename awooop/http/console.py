"""The run console under ``/ui``: server-rendered pages over the management tokens.

| route | what |
|---|---|
| ``GET /ui/login``, ``POST /ui/login`` | log in with a token (scope read, manage or admin) |
| ``POST /ui/logout`` | end the session |
| ``GET /ui/runs`` | runs, filters in the URL (project, status, channel, blocked_on, since, q) |
| ``GET /ui/runs/{project_id}/{run_id}`` | one run: blocked_on, state, timeline, steps, approvals |
| ``POST /ui/runs/{project_id}/{run_id}/{action}`` | retry, cancel, approve, reject, redrive |

Who sees what is the management API's rule (:func:`awooop.http.auth.authorize_stored`): a
``read`` or ``manage`` token its own project, an ``admin`` token every project; a ``read``
session sees no action button and its POSTs are refused (403 E-AUTH-004). Reads run in a
tenant transaction of the project (row-level security: another project's run is 404 like a
missing one) or, for an admin's list across projects, on the platform role. Every POST checks
the session's CSRF token first (:mod:`awooop.http.console_session`), then the scope, then
acts through the same functions as the CLI (:mod:`awooop.runs.control`,
:mod:`awooop.runs.approvals`, :mod:`awooop.runs.deadletters`), recording the token as
``actor`` in the event's metadata (with ``via: console``) and the person's name, when the form
gives one, in the event itself.

A run page also lists the run's model calls (each ``run.llm`` call: attempt, model, contract,
the policy revision and body hash that served it, duration, outcome, trace), folded from the
same read of the run's stream as its timeline (:mod:`projections.model_calls`).

Why Jinja2 and not f-strings: pages of tables and forms with many user-controlled strings
(inputs, reasons, step outputs) need HTML escaping everywhere; Jinja2 escapes by default
(``autoescape``), keeps the markup out of the Python, and is small, typed and well kept
(Pallets). No JavaScript: plain forms and links keep the pages testable and the URLs sharable.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode

import jinja2
import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from awooop.core.db import Connection
from awooop.core.errors import (
    AuthenticationError,
    AwoooPError,
    CsrfError,
    InvalidInputError,
    OperationNotFoundError,
    PayloadTooLargeError,
    RunNotFoundError,
    TenantShareExceededError,
)
from awooop.core.logs import get_logger
from awooop.http import console_session as sessions
from awooop.http.app import retry_after
from awooop.http.auth import authorize_stored
from awooop.ingest.credentials import ADMIN_SCOPE, READ_SCOPE, check_project_id
from awooop.log.deadletters import DeadLetterRow
from awooop.log.state import RunState, RunStatus
from awooop.runs import approvals, blocked_facts, bulk, control, deadletters, listing, store
from awooop.runs.blocked import BlockedOn, Reason
from awooop.services import Services
from projections import model_calls

T = TypeVar("T")
log = get_logger(__name__)

FORM_LIMIT = 16 * 1024
# The bulk operations this process runs (a reference keeps each task alive until it ends).
RUNNING: set[asyncio.Task[None]] = set()
ACTIONS = ("retry", "cancel", "approve", "reject", "redrive")

TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def tojson(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


def detail(value: dict[str, Any]) -> str:
    return "" if not value else json.dumps(value, ensure_ascii=False, default=str)


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("session", None)
    page = TEMPLATES.get_template(name).render(
        when=when, tojson=tojson, detail=detail, short_hash=model_calls.short_hash, **context
    )
    return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)


# The pages load nothing from elsewhere and are never framed (clickjacking).
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def error_page(exc: AwoooPError, session: sessions.Session | None) -> HTMLResponse:
    page = render(
        "error.html", exc.http_status, code=exc.code, message=exc.message, session=session
    )
    page.headers.update(retry_after(exc))
    return page


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
    """The list's filters from the URL (or a form); a project token is held to its project."""
    f = listing.parse_filter(fields, now)
    principal = session.principal
    if principal.scope != ADMIN_SCOPE:
        authorize_stored(principal, f.project, write=False)
        return msgspec.structs.replace(f, project=principal.project_id)
    if f.project is not None:
        check_project_id(f.project)
    return f


def routes(services: Services) -> list[BaseRoute]:
    keys, settings = services.keys, services.settings

    async def decide(
        conn: Connection, run_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, BlockedOn | None]:
        return await blocked_facts.blocked_on(
            conn, services.redis, keys, run_ids, settings.lease_ttl_s
        )

    async def session_or_login(request: Request) -> sessions.Session | Response:
        try:
            session = await sessions.current(services, request)
        except TenantShareExceededError as exc:
            return error_page(exc, None)
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse("/ui/login?" + urlencode({"next": target}), 303)
        return session

    async def index(_request: Request) -> Response:
        return RedirectResponse("/ui/runs", 303)

    async def login_page(request: Request) -> Response:
        token = sessions.new_login_csrf()
        nxt = request.query_params.get("next", "/ui/runs")
        page = render("login.html", login_csrf=token, next=safe_next(nxt), error=None)
        sessions.set_cookie(page, request, sessions.LOGIN_COOKIE, token, 600)
        return page

    async def login(request: Request) -> Response:
        fields = await form(request)
        nxt = safe_next(fields.get("next", "/ui/runs"))
        try:
            sessions.check_csrf(fields.get("csrf"), request.cookies.get(sessions.LOGIN_COOKIE, ""))
            secret, _session = await sessions.login(services, fields.get("token", ""))
        except AwoooPError as exc:
            token = sessions.new_login_csrf()
            page = render(
                "login.html", exc.http_status, login_csrf=token, next=nxt, error=exc.message
            )
            sessions.set_cookie(page, request, sessions.LOGIN_COOKIE, token, 600)
            return page
        response = RedirectResponse(nxt, 303)
        sessions.set_cookie(
            response, request, sessions.COOKIE, secret, int(settings.console_session_s)
        )
        response.delete_cookie(sessions.LOGIN_COOKIE, path=sessions.COOKIE_PATH)
        return response

    async def logout(request: Request) -> Response:
        session = await sessions.current(services, request)
        fields = await form(request)
        if session is not None:
            try:
                sessions.check_csrf(fields.get("csrf"), session.csrf_token)
            except CsrfError as exc:
                return error_page(exc, session)
            await sessions.logout(services, request)
        response = RedirectResponse("/ui/login", 303)
        response.delete_cookie(sessions.COOKIE, path=sessions.COOKIE_PATH)
        return response

    async def runs_page(request: Request) -> Response:
        found = await session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            now = datetime.now().astimezone()
            f = run_filter(request.query_params, session, now)
            before_text = request.query_params.get("before")
            before = None if not before_text else listing.parse_cursor(before_text)

            async def read(conn: Connection) -> listing.Page:
                return await listing.page(conn, f, decide, before=before)

            if f.project is not None:
                page = await services.db.in_tenant(f.project, read)
            else:
                page = await services.db.in_platform(read)
        except AwoooPError as exc:
            return error_page(exc, session)
        params = {k: v for k, v in request.query_params.items() if k != "before" and v}
        next_url = ""
        if page.next is not None:
            next_url = "/ui/runs?" + urlencode({**params, "before": page.next.text()})
        return render(
            "runs.html",
            session=session,
            page=page,
            f=msgspec_view(f),
            since_text=request.query_params.get("since", ""),
            admin=session.principal.scope == ADMIN_SCOPE,
            can_act=session.principal.scope != READ_SCOPE,
            bulk_query=urlencode(params),
            statuses=[s.value for s in RunStatus],
            channels=listing.CHANNELS,
            reasons=[r.value for r in Reason],
            next_url=next_url,
        )

    async def run_page(request: Request) -> Response:
        found = await session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            project_id, run_id = path_run(request)
            authorize_stored(session.principal, project_id, write=False)

            async def read(
                conn: Connection,
            ) -> tuple[
                RunState,
                BlockedOn | None,
                model_calls.RunHistory,
                list[listing.Approval],
                list[DeadLetterRow],
            ]:
                state = await store.load(conn, run_id)
                if state is None:
                    raise RunNotFoundError(run_id=run_id)
                blocked = (await decide(conn, [run_id])).get(run_id)
                history = await model_calls.history_from_log(conn, run_id)
                asked = await listing.approvals_of(conn, run_id)
                dead = await deadletters.entries_of_run(conn, project_id, run_id)
                return state, blocked, history, asked, dead

            state, blocked, history, asked, dead = await services.db.in_tenant(project_id, read)
        except AwoooPError as exc:
            return error_page(exc, session)
        return render(
            "run.html",
            session=session,
            state=state,
            blocked=blocked,
            timeline=history.timeline,
            model_calls=history.model_calls,
            approvals=asked,
            dead_letters=dead,
            can_act=session.principal.scope != READ_SCOPE,
            trace_url=settings.console_trace_url,
            done=request.query_params.get("done", "")[:200],
        )

    async def act(request: Request) -> Response:
        session = await sessions.current(services, request)
        if session is None:
            return error_page(AuthenticationError("log in first (/ui/login)"), None)
        try:
            fields = await form(request)
            sessions.check_csrf(fields.get("csrf"), session.csrf_token)
            project_id, run_id = path_run(request)
            action = request.path_params["action"]
            if action not in ACTIONS:
                raise InvalidInputError(f"unknown action {action[:40]!r}")
            principal = authorize_stored(session.principal, project_id, write=True)
            done = await perform(services, principal.actor, project_id, run_id, action, fields)
        except AwoooPError as exc:
            return error_page(exc, session)
        target = f"/ui/runs/{project_id}/{run_id}?" + urlencode({"done": done})
        return RedirectResponse(target, 303)

    async def read_in(
        session: sessions.Session, project: str | None, fn: Callable[[Connection], Awaitable[T]]
    ) -> T:
        """Reads of ``project`` (a tenant transaction), else of the session's project, or for
        an admin of every project (the platform role)."""
        if project is not None:
            return await services.db.in_tenant(project, fn)
        if session.principal.scope != ADMIN_SCOPE:
            return await services.db.in_tenant(session.principal.project_id, fn)
        return await services.db.in_platform(fn)

    def start(op: bulk.Operation) -> None:
        """Run the operation's batches in this process, after the response."""
        task = asyncio.create_task(execute(op))
        RUNNING.add(task)
        task.add_done_callback(RUNNING.discard)

    async def execute(op: bulk.Operation) -> None:
        try:
            await bulk.execute(services.db, op.project_id, op.operation_id, decide)
        except Exception as exc:  # still running: the bulk_operations loop resumes it
            log.warning(
                "bulk_operation_stopped", operation_id=str(op.operation_id), error=repr(exc)
            )

    async def bulk_preview(request: Request) -> Response:
        found = await session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            kind = bulk.check_kind(request.path_params["kind"])
            now = datetime.now().astimezone()
            f = run_filter(request.query_params, session, now)
            authorize_stored(session.principal, f.project, write=True)
            preview = await read_in(
                session, f.project, lambda conn: bulk.preview(conn, kind, f, decide)
            )
        except AwoooPError as exc:
            return error_page(exc, session)
        return render(
            "bulk.html",
            session=session,
            kind=kind,
            preview=preview,
            f=msgspec_view(f),
            since=None if f.since is None else f.since.isoformat(),
            back="/ui/runs?" + urlencode({k: v for k, v in request.query_params.items() if v}),
        )

    async def bulk_confirm(request: Request) -> Response:
        session = await sessions.current(services, request)
        if session is None:
            return error_page(AuthenticationError("log in first (/ui/login)"), None)
        try:
            fields = await form(request)
            sessions.check_csrf(fields.get("csrf"), session.csrf_token)
            kind = bulk.check_kind(request.path_params["kind"])
            f = run_filter(fields, session, datetime.now().astimezone())
            principal = authorize_stored(session.principal, f.project, write=True)
            attempts = fields.get("attempts", "3").strip() or "3"
            if not attempts.isdigit():
                raise InvalidInputError("extra attempts must be a whole number")

            async def record(conn: Connection) -> bulk.Operation:
                preview = await bulk.preview(conn, kind, f, decide)
                return await bulk.create(
                    conn,
                    kind,
                    f,
                    actor=principal.actor,
                    via="console",
                    expected=preview.total,
                    person=fields.get("actor", "").strip() or None,
                    extra_attempts=int(attempts),
                    reason=fields.get("reason", ""),
                )

            op = await bulk.in_scope(services.db, bulk.scope_of(f), record)
        except AwoooPError as exc:
            return error_page(exc, session)
        start(op)
        return RedirectResponse(f"/ui/operations/{op.operation_id}", 303)

    async def read_operation(session: sessions.Session, text: str) -> bulk.Operation:
        try:
            operation_id = uuid.UUID(text)
        except ValueError:
            raise OperationNotFoundError(operation_id=text[:64]) from None
        return await read_in(session, None, lambda conn: bulk.get(conn, operation_id))

    async def operation_page(request: Request) -> Response:
        found = await session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            op = await read_operation(session, request.path_params["operation_id"])
        except AwoooPError as exc:
            return error_page(exc, session)
        age = (datetime.now().astimezone() - op.updated_at).total_seconds()
        return render(
            "operation.html",
            session=session,
            op=op,
            done=op.scanned,
            stalled=op.state == "running" and age > bulk.STALLED_S,
            stalled_s=bulk.STALLED_S,
            can_act=session.principal.scope != READ_SCOPE,
        )

    async def operation_resume(request: Request) -> Response:
        session = await sessions.current(services, request)
        if session is None:
            return error_page(AuthenticationError("log in first (/ui/login)"), None)
        try:
            fields = await form(request)
            sessions.check_csrf(fields.get("csrf"), session.csrf_token)
            op = await read_operation(session, request.path_params["operation_id"])
            authorize_stored(session.principal, op.filter.get("project"), write=True)
        except AwoooPError as exc:
            return error_page(exc, session)
        if op.state == "running":
            start(op)
        return RedirectResponse(f"/ui/operations/{op.operation_id}", 303)

    return [
        Route("/ui", index, methods=["GET"]),
        Route("/ui/login", login_page, methods=["GET"]),
        Route("/ui/login", login, methods=["POST"]),
        Route("/ui/logout", logout, methods=["POST"]),
        Route("/ui/runs", runs_page, methods=["GET"]),
        Route("/ui/runs/{project_id}/{run_id}", run_page, methods=["GET"]),
        Route("/ui/runs/{project_id}/{run_id}/{action}", act, methods=["POST"]),
        Route("/ui/bulk/{kind}", bulk_preview, methods=["GET"]),
        Route("/ui/bulk/{kind}", bulk_confirm, methods=["POST"]),
        Route("/ui/operations/{operation_id}", operation_page, methods=["GET"]),
        Route("/ui/operations/{operation_id}/resume", operation_resume, methods=["POST"]),
    ]


def msgspec_view(f: listing.RunFilter) -> dict[str, Any]:
    return {
        "project": f.project,
        "status": None if f.status is None else f.status.value,
        "channel": f.channel,
        "reason": None if f.reason is None else f.reason.value,
        "q": f.q,
    }


def safe_next(target: str) -> str:
    """Pure: only a console path is a place to go after login (no open redirect)."""
    return target if target.startswith("/ui") and "//" not in target else "/ui/runs"


def path_run(request: Request) -> tuple[str, uuid.UUID]:
    project_id = check_project_id(request.path_params["project_id"])
    try:
        return project_id, uuid.UUID(request.path_params["run_id"])
    except ValueError:
        raise RunNotFoundError(run_id=request.path_params["run_id"][:64]) from None


async def perform(
    services: Services,
    actor: str,
    project_id: str,
    run_id: uuid.UUID,
    action: str,
    fields: dict[str, str],
) -> str:
    """Do ``action`` as the CLI does, recorded with ``actor``; what the page says after."""
    metadata = {"actor": actor, "via": "console"}
    person = fields.get("actor", "").strip() or actor
    if action == "redrive":
        wanted = fields.get("entry", "")
        entries = await services.db.in_tenant(
            project_id, lambda conn: deadletters.entries_of_run(conn, project_id, run_id)
        )
        entry = next((e for e in entries if str(e.dead_letter_id) == wanted), None)
        if entry is None:
            raise InvalidInputError(f"no dead letter {wanted[:40]!r} of this run")
        result = await deadletters.redrive(services, entry, actor=actor)
        return f"dead letter {result.id}: {result.outcome.value} {result.detail}".strip()

    async def change(conn: Connection) -> RunState:
        match action:
            case "retry":
                attempts = fields.get("attempts", "3").strip() or "3"
                if not attempts.isdigit():
                    raise InvalidInputError("extra attempts must be a whole number")
                return await control.retry(
                    conn, run_id, actor=person, extra_attempts=int(attempts), metadata=metadata
                )
            case "cancel":
                return await control.cancel(
                    conn, run_id, actor=person, reason=fields.get("reason", ""), metadata=metadata
                )
            case _:
                token = fields.get("token", "").strip()
                if not token:
                    raise InvalidInputError("the approval token is needed")
                decision = (
                    approvals.Decision.APPROVED
                    if action == "approve"
                    else approvals.Decision.REJECTED
                )
                return await approvals.decide(
                    conn,
                    run_id,
                    token,
                    decision,
                    actor=person,
                    reason=fields.get("reason", ""),
                    metadata=metadata,
                )

    state = await services.db.in_tenant(project_id, change)
    return f"{action}: the run is {state.status.value}"
