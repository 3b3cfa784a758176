"""``awooop deadletters``: inspect and re-drive the shards' dead-letter streams (R-16).

    awooop deadletters list    [--shard N] [--limit N] [--json]
    awooop deadletters redrive ID ... | --all [--shard N] [--attempts N] [--json]

``list`` prints one line per entry: its id (``SHARD:ENTRY_ID``), run, project, event, source
group, deliveries, when and why it was dead-lettered. ``redrive`` puts each entry's run back to
work as :mod:`awooop.runs.deadletters` describes (a FAILED run is retried, recorded as a
``RunRetried`` event with ``actor`` = ``cli:<OS user>`` in its metadata), then republishes the
message and removes the entry. It prints one result line per entry and exits 1 when any entry
was left in place (unknown id, undecodable message, unknown run, lost shard).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from awooop.commands.output import add_wide, table, to_json, when
from awooop.commands.runs import cli_actor
from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.runs import deadletters
from awooop.services import Services
from streams.deadletter import DeadLetter


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("deadletters", help="list or re-drive dead-letter entries")
    sub = parser.add_subparsers(dest="deadletters_command", required=True, metavar="ACTION")

    listing = sub.add_parser("list", help="the entries of every shard's dead-letter stream")
    listing.add_argument("--shard", type=int, default=None, help="only this shard")
    listing.add_argument("--limit", type=int, default=1000, help="at most N entries")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(listing)
    listing.set_defaults(run=list_dead_letters)

    redrive = sub.add_parser("redrive", help="put entries' runs back to work and remove them")
    redrive.add_argument("ids", nargs="*", metavar="ID", help="SHARD:ENTRY_ID as listed")
    redrive.add_argument("--all", action="store_true", help="every entry (of --shard)")
    redrive.add_argument("--shard", type=int, default=None, help="with --all: only this shard")
    redrive.add_argument("--attempts", type=int, default=3, help="extra attempts for FAILED runs")
    redrive.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(redrive)
    redrive.set_defaults(run=redrive_dead_letters)


def entry_view(entry: DeadLetter) -> dict[str, Any]:
    env = entry.envelope()
    return {
        "id": entry.id,
        "shard": entry.shard,
        "run_id": None if env is None else env.stream_id.removeprefix("run-"),
        "project_id": None if env is None else env.project_id,
        "event_type": None if env is None else env.event_type,
        "stream": entry.stream,
        "group": entry.group,
        "delivery_count": entry.delivery_count,
        "dead_lettered_at": datetime.fromtimestamp(entry.dead_lettered_ms / 1000, UTC),
        "reason": entry.reason,
    }


def render_entries(views: list[dict[str, Any]], *, wide: bool = False) -> str:
    header = ("ID", "RUN", "PROJECT", "EVENT", "GROUP", "DELIVERIES", "DEAD_AT", "REASON")
    rows = [
        (
            v["id"],
            v["run_id"] or "-",
            v["project_id"] or "-",
            v["event_type"] or "(undecodable)",
            v["group"],
            str(v["delivery_count"]),
            when(v["dead_lettered_at"]),
            v["reason"],
        )
        for v in views
    ]
    return table(header, rows, wide=wide)


async def list_dead_letters(settings: Settings, args: argparse.Namespace) -> int:
    if args.shard is not None:
        deadletters.check_shard(args.shard, settings.shard_count)
    if args.limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    services = await Services.open(settings, db_pool_size=1)
    try:
        entries = await deadletters.list_entries(services, args.shard, args.limit)
    finally:
        await services.close()
    views = [entry_view(e) for e in entries]
    print(to_json(views) if args.json else render_entries(views, wide=args.wide))
    return 0


async def redrive_dead_letters(settings: Settings, args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.all):
        raise InvalidInputError("name the entries to re-drive (ID ...) or pass --all")
    if args.shard is not None:
        if not args.all:
            raise InvalidInputError("--shard goes with --all (an ID names its shard)")
        deadletters.check_shard(args.shard, settings.shard_count)
    if args.attempts < 1:
        raise InvalidInputError("--attempts must be a positive integer")
    for text in args.ids:
        deadletters.parse_id(text, settings.shard_count)  # refuse a bad id before any change
    actor = cli_actor()
    results: list[deadletters.Result] = []
    services = await Services.open(settings, db_pool_size=1)
    try:
        found: list[DeadLetter | str] = list(
            await deadletters.list_entries(services, args.shard)
            if args.all
            else await deadletters.find(services, args.ids)
        )
        for item in found:
            if isinstance(item, str):
                results.append(
                    deadletters.Result(
                        id=item,
                        run_id=None,
                        project_id=None,
                        outcome=deadletters.Outcome.LEFT,
                        detail="no such dead letter",
                    )
                )
                continue
            results.append(
                await deadletters.redrive(services, item, actor=actor, attempts=args.attempts)
            )
    finally:
        await services.close()
    if args.json:
        print(to_json(results))
    else:
        rows = [
            (r.id, str(r.run_id or "-"), r.project_id or "-", str(r.outcome), r.detail)
            for r in results
        ]
        print(table(("ID", "RUN", "PROJECT", "OUTCOME", "DETAIL"), rows, wide=args.wide))
    return 1 if any(r.outcome is deadletters.Outcome.LEFT for r in results) else 0
