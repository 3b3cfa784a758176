"""``awooop deadletters``: list and re-drive the dead letters recorded in Postgres (R-16).

    awooop deadletters list    [--project P] [--shard N] [--limit N] [--json]
    awooop deadletters redrive ID ... | --all [--project P] [--shard N] [--attempts N] [--json]
    awooop deadletters discard ID ... [--json]

``list`` prints the open dead letters, newest first, one line each: its id, run, project,
event, source stream and group, deliveries, when and why it was dead-lettered. ``redrive`` puts
each one's run back to work as :mod:`awooop.runs.deadletters` describes (a FAILED run is
retried, recorded as a ``RunRetried`` event with ``actor`` = ``cli:<OS user>`` in its metadata)
and resolves the dead letter. ``discard`` resolves dead letters without touching their runs
(an undecodable message, a run given up on). Both print one result line per dead letter and
exit 1 when any was left open (unknown id, no run, unknown run, resolved already).
"""

from __future__ import annotations

import argparse
from typing import Any

from awooop.commands.output import add_wide, table, to_json, when
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.eventlog.deadletters import DeadLetterRow
from awooop.ingest.credentials import check_project_id
from awooop.runs import deadletters
from awooop.services import Services


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("deadletters", help="list or re-drive dead-letter entries")
    sub = parser.add_subparsers(dest="deadletters_command", required=True, metavar="ACTION")

    listing = sub.add_parser("list", help="the open dead letters, newest first")
    listing.add_argument("--project", default=None, help="only this project's")
    listing.add_argument("--shard", type=int, default=None, help="only the projects of shard N")
    listing.add_argument("--limit", type=int, default=1000, help="at most N entries")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(listing)
    listing.set_defaults(run=list_dead_letters)

    redrive = sub.add_parser("redrive", help="put dead letters' runs back to work, resolve them")
    redrive.add_argument("ids", nargs="*", metavar="ID", help="a dead letter's id as listed")
    redrive.add_argument("--all", action="store_true", help="every open dead letter")
    redrive.add_argument("--project", default=None, help="with --all: only this project's")
    redrive.add_argument("--shard", type=int, default=None, help="with --all: only shard N's")
    redrive.add_argument("--attempts", type=int, default=3, help="extra attempts for FAILED runs")
    redrive.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(redrive)
    redrive.set_defaults(run=redrive_dead_letters)

    discard = sub.add_parser("discard", help="resolve dead letters, leaving their runs as they are")
    discard.add_argument("ids", nargs="+", metavar="ID", help="a dead letter's id as listed")
    discard.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(discard)
    discard.set_defaults(run=discard_dead_letters)


def entry_view(entry: DeadLetterRow) -> dict[str, Any]:
    return {
        "id": str(entry.dead_letter_id),
        "run_id": None if entry.run_id is None else str(entry.run_id),
        "project_id": entry.project_id,
        "event_type": entry.event_type or None,
        "source": entry.source,
        "group": entry.group_name,
        "delivery_count": entry.delivery_count,
        "code": entry.code,
        "dead_lettered_at": entry.dead_lettered_at,
        "reason": entry.reason,
    }


def render_entries(views: list[dict[str, Any]], *, wide: bool = False) -> str:
    header = ("ID", "RUN", "PROJECT", "EVENT", "GROUP", "DELIVERIES", "DEAD_AT", "REASON")
    rows = [
        (
            v["id"],
            v["run_id"] or "-",
            v["project_id"] or "-",
            v["event_type"] or ("-" if v["run_id"] else "(undecodable)"),
            v["group"] or "-",
            str(v["delivery_count"]) if v["delivery_count"] > 0 else "-",  # attempts gave up
            when(v["dead_lettered_at"]),
            v["reason"],
        )
        for v in views
    ]
    return table(header, rows, wide=wide)


def check_filters(settings: Settings, args: argparse.Namespace) -> None:
    if args.shard is not None:
        deadletters.check_shard(args.shard, settings.shard_count)
    if args.project is not None:
        check_project_id(args.project)


async def list_dead_letters(settings: Settings, args: argparse.Namespace) -> int:
    check_filters(settings, args)
    if args.limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    services = await Services.open(settings, db_pool_size=1)
    try:
        entries = await deadletters.list_entries(
            services, args.shard, args.limit, project_id=args.project
        )
    finally:
        await services.close()
    views = [entry_view(e) for e in entries]
    print(to_json(views) if args.json else render_entries(views, wide=args.wide))
    return 0


async def redrive_dead_letters(settings: Settings, args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.all):
        raise InvalidInputError("name the entries to re-drive (ID ...) or pass --all")
    if (args.shard is not None or args.project is not None) and not args.all:
        raise InvalidInputError("--project and --shard go with --all (an ID names one)")
    check_filters(settings, args)
    if args.attempts < 1:
        raise InvalidInputError("--attempts must be a positive integer")
    for text in args.ids:
        deadletters.parse_id(text)  # refuse a bad id before any change
    actor = cli_actor()
    services = await Services.open(settings, db_pool_size=1)
    try:
        found: list[DeadLetterRow | str] = list(
            await deadletters.list_entries(services, args.shard, project_id=args.project)
            if args.all
            else await deadletters.find(services, args.ids)
        )
        results = [
            missing(item)
            if isinstance(item, str)
            else await deadletters.redrive(services, item, actor=actor, attempts=args.attempts)
            for item in found
        ]
    finally:
        await services.close()
    return report(results, args)


async def discard_dead_letters(settings: Settings, args: argparse.Namespace) -> int:
    for text in args.ids:
        deadletters.parse_id(text)  # refuse a bad id before any change
    actor = cli_actor()
    services = await Services.open(settings, db_pool_size=1)
    try:
        found = await deadletters.find(services, args.ids)
        results = [
            missing(item)
            if isinstance(item, str)
            else await deadletters.discard(services, item, actor=actor)
            for item in found
        ]
    finally:
        await services.close()
    return report(results, args)


def missing(text: str) -> deadletters.Result:
    return deadletters.Result(
        id=text,
        run_id=None,
        project_id=None,
        outcome=deadletters.Outcome.LEFT,
        detail="no such dead letter",
    )


def report(results: list[deadletters.Result], args: argparse.Namespace) -> int:
    if args.json:
        print(to_json(results))
    else:
        rows = [
            (r.id, str(r.run_id or "-"), r.project_id or "-", str(r.outcome), r.detail)
            for r in results
        ]
        print(table(("ID", "RUN", "PROJECT", "OUTCOME", "DETAIL"), rows, wide=args.wide))
    return 1 if any(r.outcome is deadletters.Outcome.LEFT for r in results) else 0
