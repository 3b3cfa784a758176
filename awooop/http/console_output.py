"""The run page's output: what the run emitted (``run.emit_output``), by attempt, live.

The page is whole as served (:func:`output_view`: the run's first :data:`PAGE_ROWS` chunks,
each attempt's text in a block of its own, an abandoned attempt's marked). While the run is
not finished, a small script (``/ui/static/console-output.js``: the Content Security Policy
allows scripts and connections to the console's own origin only) opens an ``EventSource`` on
``/ui/runs/{project_id}/{run_id}/output?after=SEQ`` (:mod:`awooop.http.output`, authorised by
the session, within the output stream caps) and appends each chunk as it comes, marks an
attempt abandoned when told, and closes at ``end``. A chunk is appended only when its ``seq``
is past the section's ``data-after``, so a page swapped in by the live poller
(:mod:`awooop.http.console_live`, once the run is final) is never appended twice. The browser
reconnects by itself with ``Last-Event-ID`` after a drop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from awooop.eventlog.state import TERMINAL
from awooop.runs.output_rules import Page

SCRIPT_PATH = "/ui/static/console-output.js"
SCRIPT = (Path(__file__).parent / "static" / "console-output.js").read_bytes()
PAGE_ROWS = 2000  # chunks a run page shows as served; the rest comes through its stream


@dataclass
class Block:
    attempt: int
    text: str
    abandoned: bool


@dataclass
class OutputView:
    blocks: list[Block] = field(default_factory=list)
    after: int = 0  # the seq of the last chunk shown
    truncated: bool = False
    more: bool = False  # more chunks than the page shows (the stream brings them)
    done: bool = False  # the run is finished and every chunk is shown: no stream


def output_view(page: Page | None) -> OutputView | None:
    """Pure: what the run page shows of ``page`` (the run's first chunks); None when there is
    nothing to show nor to wait for (a finished run that emitted nothing)."""
    if page is None:
        return None
    final = page.status in TERMINAL
    if final and not page.rows:
        return None
    view = OutputView(more=page.more, done=final and not page.more)
    for row in page.rows:
        view.after = row.seq
        if row.truncated:
            view.truncated = True
            continue
        if view.blocks and view.blocks[-1].attempt == row.attempt:
            view.blocks[-1].text += row.text
        else:
            view.blocks.append(Block(row.attempt, row.text, row.attempt < page.attempt))
    return view


async def script(_request: Request) -> Response:
    return Response(
        SCRIPT,
        media_type="text/javascript; charset=utf-8",
        headers={"cache-control": "public, max-age=300", "x-content-type-options": "nosniff"},
    )
