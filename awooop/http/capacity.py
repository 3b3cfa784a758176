"""What one tenant's management and console requests may cost: bounded, cancellable, shared.

:class:`RequestBounds` wraps the application (:mod:`awooop.http.app`) and, for every HTTP
request:

- **bounds its statements**: every role-pool transaction the request opens runs with
  ``statement_timeout`` = ``AWOOOP_HTTP_STATEMENT_TIMEOUT_S`` and must get its connection
  within that time (:func:`awooop.core.db.request_bound`); beyond it the answer is 503
  ``E-DB-003`` with ``Retry-After``, and the statement is gone from the server. The ingest
  route's own sessions are not affected (one short statement each, on their own pool).
- **cancels it when the client goes away**: the application runs in a task of its own while
  this layer waits for the client's disconnect; a client that leaves before the answer starts
  cancels that task. asyncpg then sends the server a cancel request for the statement in
  flight, the transaction is rolled back and the connection goes back to its pool, so the
  backend is idle again at once (``tests/integration/test_tenant_capacity.py`` reads
  ``pg_stat_activity``). Without it Starlette serves a request to the end whoever is left to
  read it: 12 clients that gave up after 5 s held every connection of the pool for minutes.
  The disconnect is watched only once the request's body is read (from the start for a request
  without a body), so nothing is read ahead of the route and ``Expect: 100-continue`` is still
  the route's to answer.
- **counts it against its project's share** once a route knows who asks
  (:func:`take_share`, called by :func:`awooop.http.auth.require` and the console's session
  check): at most ``AWOOOP_HTTP_TENANT_REQUESTS`` management and console requests of one
  project (admin tokens count as the platform project ``__platform__``) are in progress in a
  process; another is refused with 429 ``E-HTTP-429`` and ``Retry-After`` before it touches a
  tenant row. So one tenant's slow or numerous reads hold at most that many of the process's
  ``AWOOOP_HTTP_DB_POOL_SIZE`` connections, and other tenants' management requests go on.
  Ingest has its own pool (:mod:`awooop.http.ingest`) and no share: management reads never
  wait for it nor it for them.

Ingest requests (``/v1/projects/{p}/channels/...``) pass through untouched: one short statement
on their own sessions, whose answer (202 or a refusal) a provider that left retries anyway.
"""

from __future__ import annotations

import asyncio
import collections
import re

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from awooop.core.db import request_bound
from awooop.core.errors import TenantShareExceededError
from awooop.core.logs import get_logger
from awooop.http.server import READ_TIMEOUT_MARK

log = get_logger(__name__)

SHARES = "awooop.shares"  # in the ASGI scope: the request's Held
INGEST_PATH = re.compile(r"^/v1/projects/[^/]+/channels/")


class TenantShare:
    """How many requests each project has in progress, against one limit (one per process)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_progress: collections.Counter[str] = collections.Counter()

    def take(self, project: str) -> None:
        """Count one more request of ``project``, or refuse it (E-HTTP-429)."""
        if self.in_progress[project] >= self.limit:
            raise TenantShareExceededError(
                f"project {project} already has {self.limit} management or console requests in "
                "progress (AWOOOP_HTTP_TENANT_REQUESTS): try again in a moment"
            )
        self.in_progress[project] += 1

    def give_back(self, project: str) -> None:
        self.in_progress[project] -= 1
        if self.in_progress[project] <= 0:
            del self.in_progress[project]


class Held:
    """The projects one request counts against (each at most once), given back at its end."""

    def __init__(self, share: TenantShare) -> None:
        self.share = share
        self.projects: set[str] = set()

    def take(self, project: str) -> None:
        if project not in self.projects:
            self.share.take(project)
            self.projects.add(project)

    def give_back(self) -> None:
        for project in self.projects:
            self.share.give_back(project)
        self.projects.clear()


def take_share(request: Request, project: str) -> None:
    """Count ``request`` against ``project``'s share (no-op outside :class:`RequestBounds`)."""
    held = request.scope.get(SHARES)
    if isinstance(held, Held):
        held.take(project)


def release_share(request: Request) -> None:
    """Give back the shares ``request`` holds before it ends: a long-lived answer (a stream of
    run output, :mod:`awooop.http.output_streams`) counts against caps of its own instead."""
    held = request.scope.get(SHARES)
    if isinstance(held, Held):
        held.give_back()


def has_body(scope: Scope) -> bool:
    """Whether the request says a body follows (its head is all there is otherwise)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


class DisconnectWatch:
    """The request's ``receive``, and a task that learns when the client is gone.

    Until the body is read the route's calls go straight through; from then on (or from the
    start, for a request without a body) one task reads ``receive`` and hands each message on
    to the route, setting :attr:`gone` at the disconnect. After the body only the disconnect
    (or the end of the response) can come, so at most two messages are held."""

    def __init__(self, receive: Receive, *, has_body: bool) -> None:
        self._receive = receive
        self._ahead: collections.deque[Message] = collections.deque()
        self._arrived = asyncio.Event()
        self.gone = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        if not has_body:
            self._start()

    def _start(self) -> None:
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.gone.set()
            self._ahead.append(message)
            self._arrived.set()
            if self.gone.is_set():
                return

    async def receive(self) -> Message:
        if self._reader is None:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.gone.set()
            elif not message.get("more_body", False):
                self._start()
            return message
        while not self._ahead:
            self._arrived.clear()
            await self._arrived.wait()
        return self._ahead.popleft()

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()


class RequestBounds:
    """ASGI middleware: statement bound, cancellation on disconnect, tenant shares."""

    def __init__(self, app: ASGIApp, *, statement_timeout_s: float, tenant_requests: int) -> None:
        self.app = app
        self.statement_timeout_s = statement_timeout_s
        self.share = TenantShare(tenant_requests)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or INGEST_PATH.match(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        held = Held(self.share)
        scope[SHARES] = held
        watch = DisconnectWatch(receive, has_body=has_body(scope))
        started = False

        async def send_on(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            with request_bound(self.statement_timeout_s):
                serving = asyncio.ensure_future(self.app(scope, watch.receive, send_on))
            gone = asyncio.ensure_future(watch.gone.wait())
            try:
                await asyncio.wait({serving, gone}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                serving.cancel()
                raise
            finally:
                gone.cancel()
            if not serving.done() and not started:
                serving.cancel()
                _log_gone(scope)
            try:
                await serving
            except asyncio.CancelledError:
                if not watch.gone.is_set():
                    raise  # cancelled from outside (the server stopping), not by the client
        finally:
            watch.stop()
            held.give_back()


def _log_gone(scope: Scope) -> None:
    if READ_TIMEOUT_MARK not in scope:  # the edge's own timeout line says it already
        path = str(scope.get("path", ""))[:200]
        log.info("http_client_disconnected", method=scope.get("method"), path=path)
