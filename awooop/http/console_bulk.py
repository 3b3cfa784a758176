"""The console's bulk operations: ``GET /ui/bulk/{kind}`` (the preview of a retry or cancel of
every run the list's filters match), ``POST /ui/bulk/{kind}`` (record the operation and run it
in this process, after the response), ``GET /ui/operations/{operation_id}`` (its progress) and
``POST /ui/operations/{operation_id}/resume`` (:mod:`awooop.runs.bulk`)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from awooop.core.db import Connection
from awooop.core.errors import AwoooPError, OperationNotFoundError
from awooop.core.logs import get_logger
from awooop.http import console_session as sessions
from awooop.http.auth import Principal, authorize_stored
from awooop.http.console_access import ConsoleAccess
from awooop.http.console_actions import extra_attempts
from awooop.http.console_render import error_page, filter_view, render
from awooop.http.console_requests import run_filter
from awooop.ingest.credentials import READ_SCOPE
from awooop.runs import bulk, listing

log = get_logger(__name__)

# The bulk operations this process runs (a reference keeps each task alive until it ends).
RUNNING: set[asyncio.Task[None]] = set()


class BulkOperations(ConsoleAccess):
    async def bulk_preview(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            kind = bulk.check_kind(request.path_params["kind"])
            now = datetime.now().astimezone()
            f = run_filter(request.query_params, session, now)
            authorize_stored(session.principal, f.project, write=True)
            preview = await self.read_in(
                session, f.project, lambda conn: bulk.preview(conn, kind, f, self.decide)
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        return render(
            "bulk.html",
            session=session,
            kind=kind,
            preview=preview,
            f=filter_view(f),
            since=None if f.since is None else f.since.isoformat(),
            excluded=list(f.exclude_codes or ()),
            back="/ui/runs?" + urlencode({k: v for k, v in request.query_params.items() if v}),
        )

    async def bulk_confirm(self, request: Request) -> Response:
        posted = await self.posted(request)
        if isinstance(posted, Response):
            return posted
        session, fields = posted
        try:
            kind = bulk.check_kind(request.path_params["kind"])
            f = run_filter(fields, session, datetime.now().astimezone())
            principal = authorize_stored(session.principal, f.project, write=True)
            attempts = extra_attempts(fields)
            op = await bulk.in_scope(
                self.services.db,
                bulk.scope_of(f),
                lambda conn: self.record(conn, kind, f, principal, attempts, fields),
            )
        except AwoooPError as exc:
            return error_page(exc, session, request)
        self.start(op)
        return RedirectResponse(f"/ui/operations/{op.operation_id}", 303)

    async def record(
        self,
        conn: Connection,
        kind: str,
        f: listing.RunFilter,
        principal: Principal,
        attempts: int,
        fields: dict[str, str],
    ) -> bulk.Operation:
        """The operation, expecting as many runs as its preview counts now."""
        preview = bulk.check_bounded(await bulk.preview(conn, kind, f, self.decide))
        return await bulk.create(
            conn,
            kind,
            f,
            actor=principal.actor,
            via="console",
            expected=preview.total,
            person=fields.get("actor", "").strip() or None,
            extra_attempts=attempts,
            reason=fields.get("reason", ""),
        )

    async def operation_page(self, request: Request) -> Response:
        found = await self.session_or_login(request)
        if isinstance(found, Response):
            return found
        session = found
        try:
            op = await self.read_operation(session, request.path_params["operation_id"])
        except AwoooPError as exc:
            return error_page(exc, session, request)
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

    async def operation_resume(self, request: Request) -> Response:
        posted = await self.posted(request)
        if isinstance(posted, Response):
            return posted
        session, _fields = posted
        try:
            op = await self.read_operation(session, request.path_params["operation_id"])
            authorize_stored(session.principal, op.filter.get("project"), write=True)
        except AwoooPError as exc:
            return error_page(exc, session, request)
        if op.state == "running":
            self.start(op)
        return RedirectResponse(f"/ui/operations/{op.operation_id}", 303)

    async def read_operation(self, session: sessions.Session, text: str) -> bulk.Operation:
        try:
            operation_id = uuid.UUID(text)
        except ValueError:
            raise OperationNotFoundError(operation_id=text[:64]) from None
        return await self.read_in(session, None, lambda conn: bulk.get(conn, operation_id))

    def start(self, op: bulk.Operation) -> None:
        """Run the operation's batches in this process, after the response."""
        task = asyncio.create_task(self.execute(op))
        RUNNING.add(task)
        task.add_done_callback(RUNNING.discard)

    async def execute(self, op: bulk.Operation) -> None:
        try:
            await bulk.execute(self.services.db, op.project_id, op.operation_id, self.decide)
        except Exception as exc:  # still running: the bulk_operations loop resumes it
            log.warning(
                "bulk_operation_stopped", operation_id=str(op.operation_id), error=repr(exc)
            )
