"""``awooop projects``: pause and resume a project, or one of its channels or contracts.

    awooop projects pause  PROJECT [--channel C | --contract K] [--reason TEXT] [--json]
    awooop projects resume PROJECT [--channel C | --contract K] [--json]
    awooop projects pauses [--project P] [--history] [--limit N] [--json] [--wide]
    awooop projects limit|unlimit|limits ...   (concurrency keys: awooop.commands.limits)
    awooop projects budget|rate-limit set|clear|list ...   (awooop.commands.projects_flow)
    awooop projects set|shares ...   (weights of the fair share: awooop.commands.shares)
    awooop projects price set|clear|list ...   (awooop.commands.projects_prices)
    awooop projects require-version|clear-version|required-versions ...   (handler versions a
                                               contract accepts: awooop.commands.versions)

``pause`` stops new attempts of the scope on every worker from the moment it commits: intake
still accepts and deduplicates submissions, running attempts finish, waiting runs stay PENDING
(``blocked_on``: ``paused``). Pausing a paused scope changes nothing and says so. ``resume``
ends the pause; the held-back runs start again, oldest first (exit 1, E-PAUSE-001, when the
scope was not paused). ``pauses`` lists the active pauses, with ``--history`` the resumed ones
too, newest first. Who acted is recorded as ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
from typing import Any

from awooop.commands import limits, projects_flow, projects_prices, shares, versions
from awooop.commands.output import add_wide, table, to_json, when
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.ingest.credentials import check_project_id
from awooop.runs import pauses
from awooop.runs.pause_rules import Pause, describe_scope, scope_of
from awooop.services import Services


def _scope_options(parser: Any) -> None:
    parser.add_argument("project", metavar="PROJECT", help="the project")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--channel", default=None, help="only this channel's runs")
    which.add_argument("--contract", default=None, help="only this contract's runs")
    parser.add_argument("--json", action="store_true", help="the pause as JSON")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "projects",
        help="pause or resume a project's runs; limit them per concurrency key; its model-call "
        "budgets, prices and rate limits; its weight in the fair share; the handler versions "
        "its contracts accept",
    )
    sub = parser.add_subparsers(dest="projects_command", required=True, metavar="ACTION")

    stop = sub.add_parser("pause", help="no new attempts for a project, channel or contract")
    _scope_options(stop)
    stop.add_argument("--reason", default="", help="why (shown in blocked_on)")
    stop.set_defaults(run=pause_scope)

    go = sub.add_parser("resume", help="end a pause: the waiting runs start, oldest first")
    _scope_options(go)
    go.set_defaults(run=resume_scope)

    listing = sub.add_parser("pauses", help="the active pauses (--history: all)")
    listing.add_argument("--project", default=None, help="only this project's")
    listing.add_argument("--history", action="store_true", help="resumed pauses too")
    listing.add_argument("--limit", type=int, default=1000, help="at most N pauses")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(listing)
    listing.set_defaults(run=list_pauses)
    limits.register_actions(sub)
    projects_flow.register(sub)
    shares.register_actions(sub)
    projects_prices.register(sub)
    versions.register_actions(sub)


def pause_view(p: Pause) -> dict[str, Any]:
    return {
        "pause_id": p.pause_id,
        "project_id": p.project_id,
        "scope": p.scope.value,
        "key": p.scope_key or None,
        "reason": p.reason,
        "paused_by": p.paused_by,
        "paused_at": p.paused_at,
        "resumed_by": p.resumed_by,
        "resumed_at": p.resumed_at,
    }


async def pause_scope(settings: Settings, args: argparse.Namespace) -> int:
    project_id = check_project_id(args.project)
    scope, key = scope_of(args.channel, args.contract)
    services = await Services.open(settings, db_pool_size=1)
    try:
        made, created = await services.db.in_tenant(
            project_id,
            lambda conn: pauses.pause(
                conn, project_id, scope, key, reason=args.reason, actor=cli_actor()
            ),
        )
    finally:
        await services.close()
    if args.json:
        print(to_json({**pause_view(made), "created": created}))
    else:
        what = f"{describe_scope(scope, key)} of {project_id}"
        print(f"{what} paused" if created else f"{what} was already paused by {made.paused_by}")
    return 0


async def resume_scope(settings: Settings, args: argparse.Namespace) -> int:
    project_id = check_project_id(args.project)
    scope, key = scope_of(args.channel, args.contract)
    services = await Services.open(settings, db_pool_size=1)
    try:
        ended = await services.db.in_tenant(
            project_id, lambda conn: pauses.resume(conn, project_id, scope, key, actor=cli_actor())
        )
    finally:
        await services.close()
    if args.json:
        print(to_json(pause_view(ended)))
    else:
        print(f"{describe_scope(scope, key)} of {project_id} resumed")
    return 0


async def list_pauses(settings: Settings, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    project_id = None if args.project is None else check_project_id(args.project)
    services = await Services.open(settings, db_pool_size=1)
    try:
        found = await services.db.in_platform(
            lambda conn: pauses.listing(conn, project_id, history=args.history, limit=args.limit)
        )
    finally:
        await services.close()
    views = [pause_view(p) for p in found]
    if args.json:
        print(to_json(views))
        return 0
    rows = [
        [
            v["project_id"],
            v["scope"],
            v["key"] or "-",
            v["paused_by"],
            when(v["paused_at"]),
            when(v["resumed_at"]),
            v["reason"] or "-",
        ]
        for v in views
    ]
    header = ["PROJECT", "SCOPE", "KEY", "PAUSED_BY", "PAUSED_AT", "RESUMED_AT", "REASON"]
    print(table(header, rows, wide=args.wide))
    return 0
