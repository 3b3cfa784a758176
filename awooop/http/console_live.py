"""Live console pages: the list and run pages update themselves without a reload.

A small script, served from the app (``/ui/static/console-live.js``: the pages' Content
Security Policy allows scripts and fetches from the console's own origin only, nothing
inline), fetches the page again every ``AWOOOP_CONSOLE_LIVE_S`` seconds on a run page and
2.5 times that on the list, while the tab is visible, and swaps the page's live regions (the
ids its ``<script data-live>`` names) unless the person is typing in a form inside one. A run
page whose run is final stops polling. Without JavaScript every page is whole as served.

The polls are cheap and bounded: each one is a console request like any other (the session,
then the project's share of :mod:`awooop.http.capacity`: a poll past it is 429 and the script
waits longer). A run page answers ``If-None-Match`` with 304 from one primary-key read of the
run's version (:func:`run_etag`) before it reads the run's stream; the list answers 304 when
its page is the same as the one the browser has (:func:`body_etag`).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from awooop.http import console_session as sessions

SCRIPT_PATH = "/ui/static/console-live.js"
SCRIPT = (Path(__file__).parent / "static" / "console-live.js").read_bytes()
LIST_FACTOR = 2.5  # the list polls this many times less often than a run page
# A run still going changes with the clock too (its open bars grow, a lease expires): its
# version tag also names the current slice of this many seconds.
CLOCK_SLICE_S = 10


def run_etag(version: int, status: str, now: datetime, *, final: bool, context: str) -> str:
    """Pure: the tag of a run page: the run's version and status, the clock slice while the
    run is not final, and ``context`` (who looks, and how: :func:`page_context`)."""
    slice_ = "final" if final else str(int(now.timestamp() // CLOCK_SLICE_S))
    return _tag(f"run|{version}|{status}|{slice_}|{context}")


def body_etag(body: bytes) -> str:
    """Pure: the tag of a page by its content."""
    return _tag(hashlib.sha256(body).hexdigest())


def _tag(text: str) -> str:
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def page_context(request: Request, session: sessions.Session) -> str:
    """What else than the run a page depends on: the session (its scope and the CSRF token its
    forms carry) and the URL's query (the timeline's filter)."""
    return f"{session.principal.scope}|{session.csrf_token}|{request.url.query}"


def matches(request: Request, etag: str) -> bool:
    """Whether the browser already has the page tagged ``etag`` (never when a notice is to be
    shown once: that page must be served)."""
    if sessions.NOTICE_COOKIE in request.cookies:
        return False
    asked = request.headers.get("if-none-match", "")
    return etag in {t.strip().removeprefix("W/") for t in asked.split(",")}


def not_modified(etag: str, headers: dict[str, str]) -> Response:
    return Response(status_code=304, headers={**headers, "etag": etag})


async def script(_request: Request) -> Response:
    return Response(
        SCRIPT,
        media_type="text/javascript; charset=utf-8",
        headers={"cache-control": "public, max-age=300", "x-content-type-options": "nosniff"},
    )
