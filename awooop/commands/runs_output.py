"""``awooop runs output [PROJECT] RUN_ID [--follow] [--after SEQ] [--json]``: a run's streamed
output (``run.emit_output``), read from Postgres in a tenant transaction of its project.

The text goes to stdout as it was emitted, every attempt's in order; to stderr go a line when
an attempt's output was abandoned (the run went on in a later attempt, which emits again from
the top), when the output reached its limit, and, once the run is finished, its status. With
``--follow`` the command waits for more until the run is finished (a ``LISTEN`` on the output
channel, else a read every ``AWOOOP_OUTPUT_POLL_S``); without, it prints what there is now.
``--json``: one JSON object a line (``{"event": "output", "seq", "attempt", "offset", "end",
"text", "at"}``, ``abandoned``, ``truncated``, ``end``), the events of the HTTP stream.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

import msgspec

from awooop.commands.runs_parsing import split_ids
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import RunNotFoundError
from awooop.runs import output_log, reads
from awooop.runs.output_bell import OutputBell
from awooop.runs.output_rules import Abandoned, Chunk, End, Follow, Item, resume_after

_encode = msgspec.json.Encoder().encode


def register(actions: Any) -> None:
    output = actions.add_parser(
        "output", help="the run's streamed output (--follow: until it ends)"
    )
    output.add_argument(
        "ids", nargs="+", metavar="[PROJECT] RUN_ID", help="the run (its project is looked up)"
    )
    output.add_argument("--follow", action="store_true", help="wait for more until the run ends")
    output.add_argument("--after", default="0", metavar="SEQ", help="only chunks after this seq")
    output.add_argument("--json", action="store_true", help="one JSON event a line")
    output.set_defaults(run=show_output)


def line_of(item: Item, as_json: bool) -> tuple[str, bool]:
    """Pure: what to print for ``item`` and whether it goes to stdout (else stderr)."""
    if as_json:
        match item:
            case Chunk(truncated=True):
                data: dict[str, Any] = {
                    "event": "truncated",
                    "seq": item.seq,
                    "offset": item.offset,
                }
            case Chunk():
                data = {"event": "output", **msgspec.to_builtins(item)}
                del data["truncated"]
            case Abandoned():
                data = {"event": "abandoned", "attempt": item.attempt, "by": item.by}
            case End():
                data = {"event": "end", "status": item.status, "attempt": item.attempt}
        return _encode(data).decode() + "\n", True
    match item:
        case Chunk(truncated=True):
            return "\n[the output reached its limit: the rest was dropped]\n", False
        case Chunk():
            return item.text, True
        case Abandoned():
            return f"\n[attempt {item.attempt} was abandoned: attempt {item.by} follows]\n", False
        case End():
            return f"\n[run {item.status} (attempt {item.attempt})]\n", False


async def show_output(settings: Settings, args: argparse.Namespace) -> int:
    project, run_id = split_ids(args.ids)
    follow = Follow(resume_after(None, args.after))
    db = await Database.open(settings.database_url, max_size=1)
    bell = OutputBell(settings.database_url) if args.follow else None
    try:
        if project is None:
            project = await db.in_platform(lambda conn: reads.project_of(conn, run_id))
            if project is None:
                raise RunNotFoundError(run_id=run_id)
        with contextlib.ExitStack() as stack:
            rung = None if bell is None else stack.enter_context(bell.watch(run_id))
            while not follow.done:
                if rung is not None:
                    rung.clear()
                page = await db.in_tenant(
                    project,
                    lambda conn: output_log.page(
                        conn, run_id, follow.position, output_log.PAGE_ROWS
                    ),
                    timeout_s=settings.http_statement_timeout_s,
                )
                if page is None:
                    raise RunNotFoundError(run_id=run_id)
                for item in follow.take(page):
                    text, out = line_of(item, args.json)
                    if out or not args.json:
                        stream = sys.stdout if out else sys.stderr
                        stream.write(text)
                        stream.flush()
                if page.more or follow.done:
                    continue
                if rung is None:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(rung.wait(), settings.output_poll_s)
    finally:
        if bell is not None:
            await bell.close()
        await db.close()
    return 0
