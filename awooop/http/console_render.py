"""The console's HTML: Jinja2 templates (``awooop/http/templates``), the security headers every
page carries, and the error page a refusal shows.

Why Jinja2 and not f-strings: pages of tables and forms with many user-controlled strings
(inputs, reasons, step outputs) need HTML escaping everywhere; Jinja2 escapes by default
(``autoescape``), keeps the markup out of the Python, and is small, typed and well kept
(Pallets). Plain forms and links keep the pages testable and the URLs sharable; the one script
(:mod:`awooop.http.console_live`) only refreshes what a page shows.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from awooop.core.errors import AwoooPError
from awooop.http import console_session as sessions
from awooop.http.app import retry_after
from awooop.http.console_requests import came_from
from awooop.projections import model_calls
from awooop.runs import listing

TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)

# The pages load nothing from elsewhere and are never framed (clickjacking); their one script
# is the console's own file (no inline script), which fetches only the console's own pages.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "script-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def when(moment: datetime | None) -> str:
    """Pure: a time as every page shows it, in UTC and saying so."""
    if moment is None:
        return "-"
    shown = moment if moment.tzinfo is None else moment.astimezone(UTC)
    return shown.strftime("%Y-%m-%d %H:%M:%S UTC")


def attempts(count: int, limit: int) -> tuple[str, str]:
    """Pure: a run's attempts as shown, and why, when the count is past the limit. The count
    numbers every claim and only grows (it fences workers); the limit counts the attempts
    charged to the run: a claim that was not charged (a suspect requeued, a lease given back
    uncharged) moves the limit up, and one given back charged at the limit does not."""
    if count <= limit:
        return f"{count} of {limit}", ""
    why = (
        f"{count - limit} claim(s) past the limit of {limit}: every claim is numbered, "
        "the limit counts only the attempts charged to the run"
    )
    return f"{count} of {limit} (+{count - limit})", why


def deliveries(count: int) -> str:
    """Pure: a dead letter's deliveries; "-" when no stream delivery gave up (the run's
    attempts did, so there is no count)."""
    return "-" if count <= 0 else str(count)


def tojson(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


def detail(value: dict[str, Any]) -> str:
    return "" if not value else json.dumps(value, ensure_ascii=False, default=str)


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("session", None)
    page = TEMPLATES.get_template(name).render(
        when=when,
        tojson=tojson,
        detail=detail,
        short_hash=model_calls.short_hash,
        attempts=attempts,
        deliveries=deliveries,
        **context,
    )
    return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)


def error_page(
    exc: AwoooPError, session: sessions.Session | None, request: Request | None = None
) -> HTMLResponse:
    """The page of a refusal, with a way back (:func:`console_requests.came_from`)."""
    page = render(
        "error.html",
        exc.http_status,
        code=exc.code,
        message=exc.message,
        session=session,
        back="/ui/runs" if request is None else came_from(request),
    )
    page.headers.update(retry_after(exc))
    return page


def filter_view(f: listing.RunFilter) -> dict[str, Any]:
    """Pure: a run filter as the templates show it (enums as their values)."""
    return {
        "project": f.project,
        "status": None if f.status is None else f.status.value,
        "channel": f.channel,
        "reason": None if f.reason is None else f.reason.value,
        "q": f.q,
        "search": f.search,
        "exclude_codes": ",".join(f.exclude_codes or ()),
    }
