"""``awooop projects limit|unlimit|limits``: concurrency limits of a channel or contract.

    awooop projects limit PROJECT (--channel C | --contract K) --key EXPR [--max EXPR]
                          [--global-max N] [--depth-cap N] [--json]
    awooop projects unlimit PROJECT (--channel C | --contract K) [--json]
    awooop projects limits [--project P] [--top N] [--json]

``limit`` makes or replaces the limit (:mod:`awooop.runs.concurrency`): at most ``--max``
runs of one key execute at once (an expression, default 1), at most ``--global-max`` of the
channel or contract over all its keys, and intake refuses a submission whose key has
``--depth-cap`` runs queued (429 E-CONCURRENCY-001). ``limits`` lists the limits and the
keys with the most runs waiting, then executing. Who acted is recorded as ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from awooop.commands.output import answer, table, to_json, when
from awooop.commands.projects_db import in_platform, in_project, project_or_all, scope_target
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.runs import concurrency
from awooop.runs.pause_rules import describe_scope


def _scope_options(parser: Any) -> None:
    parser.add_argument("project", metavar="PROJECT", help="the project")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--channel", default=None, help="the channel's runs")
    which.add_argument("--contract", default=None, help="the contract's runs")
    parser.add_argument("--json", action="store_true", help="the limit as JSON")


def register_actions(sub: Any) -> None:
    """The limit actions of ``awooop projects``."""
    limit = sub.add_parser("limit", help="limit a channel's or contract's runs per key")
    _scope_options(limit)
    limit.add_argument("--key", required=True, help="the key expression, e.g. input.customer_id")
    limit.add_argument("--max", default="1", help="runs of one key at once (an expression)")
    limit.add_argument("--global-max", type=int, default=None, help="runs of all keys at once")
    limit.add_argument("--depth-cap", type=int, default=None, help="queued runs per key")
    limit.set_defaults(run=set_limit)

    unlimit = sub.add_parser("unlimit", help="drop a channel's or contract's limit")
    _scope_options(unlimit)
    unlimit.set_defaults(run=remove_limit)

    limits = sub.add_parser("limits", help="the limits and the busiest keys")
    limits.add_argument("--project", default=None, help="only this project's")
    limits.add_argument("--top", type=int, default=20, help="at most N keys")
    limits.add_argument("--json", action="store_true", help="JSON instead of tables")
    limits.set_defaults(run=list_limits)


async def set_limit(settings: Settings, args: argparse.Namespace) -> int:
    project_id, scope, key = scope_target(args)
    made = await in_project(
        settings,
        project_id,
        lambda conn: concurrency.set_limit(
            conn,
            project_id,
            scope,
            key,
            key_expr=args.key,
            max_expr=args.max,
            global_max=args.global_max,
            depth_cap=args.depth_cap,
            actor=cli_actor(),
        ),
    )
    what = f"{describe_scope(scope, key)} of {project_id}"
    return answer(args, asdict(made), f"{what}: {made.max_expr} per {made.key_expr}")


async def remove_limit(settings: Settings, args: argparse.Namespace) -> int:
    project_id, scope, key = scope_target(args)
    gone = await in_project(
        settings,
        project_id,
        lambda conn: concurrency.remove_limit(conn, project_id, scope, key, actor=cli_actor()),
    )
    what = f"{describe_scope(scope, key)} of {project_id}"
    return answer(args, asdict(gone), f"{what}: no concurrency limit")


async def list_limits(settings: Settings, args: argparse.Namespace) -> int:
    if args.top < 1:
        raise InvalidInputError("--top must be at least 1")
    project_id = project_or_all(args.project)
    limits, keys = await in_platform(settings, lambda conn: _both(conn, project_id, args.top))
    if args.json:
        print(to_json({"limits": [asdict(x) for x in limits], "keys": [asdict(k) for k in keys]}))
        return 0
    print(
        table(
            ["PROJECT", "SCOPE", "ON", "KEY", "MAX", "GLOBAL", "DEPTH", "SET_BY", "SET_AT"],
            [
                [
                    x.project_id,
                    x.scope,
                    x.scope_key,
                    x.key_expr,
                    x.max_expr,
                    str(x.global_max or "-"),
                    str(x.depth_cap or "-"),
                    x.set_by,
                    when(x.set_at),
                ]
                for x in limits
            ],
        )
    )
    print()
    print(
        table(
            ["PROJECT", "KEY", "EXECUTING", "MAX", "WAITING", "OLDEST_WAITING"],
            [
                [
                    k.project_id,
                    k.key,
                    str(k.executing),
                    str(k.max or "-"),
                    str(k.waiting),
                    when(k.oldest_waiting_at),
                ]
                for k in keys
            ],
        )
    )
    return 0


async def _both(
    conn: Any, project_id: str | None, top: int
) -> tuple[list[concurrency.StoredLimit], list[concurrency.KeyUsage]]:
    return await concurrency.listing(conn, project_id), await concurrency.usage(
        conn, project_id, top
    )
