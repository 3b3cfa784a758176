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
from awooop.commands.output import answer, table, when
from awooop.commands.projects_db import (
    in_platform,
    in_project,
    listing_options,
    listing_scope,
    scope_target,
)
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.runs import pauses
from awooop.runs.pause_rules import Pause, describe_scope


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
    listing_options(listing, ended="resumed pauses too", rows="pauses")
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
    project_id, scope, key = scope_target(args)
    made, created = await in_project(
        settings,
        project_id,
        lambda conn: pauses.pause(
            conn, project_id, scope, key, reason=args.reason, actor=cli_actor()
        ),
    )
    what = f"{describe_scope(scope, key)} of {project_id}"
    said = f"{what} paused" if created else f"{what} was already paused by {made.paused_by}"
    return answer(args, {**pause_view(made), "created": created}, said)


async def resume_scope(settings: Settings, args: argparse.Namespace) -> int:
    project_id, scope, key = scope_target(args)
    ended = await in_project(
        settings,
        project_id,
        lambda conn: pauses.resume(conn, project_id, scope, key, actor=cli_actor()),
    )
    return answer(args, pause_view(ended), f"{describe_scope(scope, key)} of {project_id} resumed")


async def list_pauses(settings: Settings, args: argparse.Namespace) -> int:
    project_id = listing_scope(args)
    found = await in_platform(
        settings,
        lambda conn: pauses.listing(conn, project_id, history=args.history, limit=args.limit),
    )
    views = [pause_view(p) for p in found]
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
    return answer(args, views, table(header, rows, wide=args.wide))
