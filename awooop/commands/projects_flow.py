"""``awooop projects budget|rate-limit``: budgets (in tokens or in cost) and rate limits of a
project's model calls (flow control, scope ``awooop_llm``; the prices a budget in cost needs:
:mod:`awooop.commands.projects_prices`).

    awooop projects budget set PROJECT (--tokens N | --cost N) [--period day] [--model M]
                                       [--reserve N] [--on-exceed wait|fail] [--json]
    awooop projects budget clear PROJECT [--model M] [--json]
    awooop projects budget list [--project P] [--history] [--limit N] [--json] [--wide]
    awooop projects rate-limit set PROJECT --limit N [--period second] [--burst B] [--model M]
                                           [--json]
    awooop projects rate-limit clear PROJECT [--model M] [--json]
    awooop projects rate-limit list [--project P] [--history] [--limit N] [--json] [--wide]

``--model`` scopes the row to one model (the one the policy routes the call to); without it the
row holds every model call of the project. ``set`` replaces the row in force (the old one is
kept as history, ``list --history``); ``clear`` ends it (exit 1, E-BUDGET-003, when there is
none). ``--cost N`` is N credits per period (the unit of the project's prices, ``awooop
projects price``): a budget in cost of one model needs that model's price (E-BUDGET-004).
A budget's period is ``second|minute|hour|day|week`` or ``N`` followed by ``s|m|h|d|w``;
``list`` shows the current period's use. Who acted is recorded as ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from awooop.commands.output import add_wide, table, to_json, when
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.ingest.credentials import check_project_id
from awooop.llm import flow_store
from awooop.llm.flow_rules import (
    Budget,
    OnExceed,
    RateLimit,
    check_model,
    describe_budget,
    key_text,
    parse_period,
)
from awooop.services import Services

T = TypeVar("T")


def register(sub: Any) -> None:
    budget = sub.add_parser("budget", help="budgets (tokens or cost) of a project's model calls")
    bsub = budget.add_subparsers(dest="budget_command", required=True, metavar="ACTION")
    bset = bsub.add_parser(
        "set",
        help="set the budget (replaces the one in force)",
        description="set the budget (replaces the one in force)",
    )
    _target(bset)
    amount = bset.add_mutually_exclusive_group(required=True)
    amount.add_argument("--tokens", type=int, default=None, help="tokens per period")
    amount.add_argument(
        "--cost", type=int, default=None, help="credits per period (at the model's price)"
    )
    bset.add_argument("--period", default="day", help="second|minute|hour|day|week or Nh...")
    bset.add_argument(
        "--reserve", type=int, default=1024, help="tokens a call without max_tokens reserves"
    )
    bset.add_argument(
        "--on-exceed",
        choices=[o.value for o in OnExceed],
        default=OnExceed.WAIT.value,
        help="wait for the next period (blocked_on over_budget) or fail (E-BUDGET-001)",
    )
    bset.set_defaults(run=set_budget)
    bclear = bsub.add_parser(
        "clear", help="end the budget in force", description="end the budget in force"
    )
    _target(bclear)
    bclear.set_defaults(run=clear_budget)
    blist = bsub.add_parser(
        "list",
        help="budgets in force and this period's use",
        description="budgets in force and this period's use",
    )
    _listing(blist)
    blist.set_defaults(run=list_budgets)

    limit = sub.add_parser("rate-limit", help="rate limits of a project's model calls")
    lsub = limit.add_subparsers(dest="limit_command", required=True, metavar="ACTION")
    lset = lsub.add_parser(
        "set",
        help="set the rate limit (replaces the one in force)",
        description="set the rate limit (replaces the one in force)",
    )
    _target(lset)
    lset.add_argument("--limit", type=int, required=True, help="calls per period")
    lset.add_argument("--period", default="second", help="second|minute|hour or Ns...")
    lset.add_argument("--burst", type=int, default=None, help="calls at once (default --limit)")
    lset.set_defaults(run=set_limit)
    lclear = lsub.add_parser(
        "clear", help="end the rate limit in force", description="end the rate limit in force"
    )
    _target(lclear)
    lclear.set_defaults(run=clear_limit)
    llist = lsub.add_parser("list", help="rate limits in force", description="rate limits in force")
    _listing(llist)
    llist.set_defaults(run=list_limits)


def _target(parser: Any) -> None:
    parser.add_argument("project", metavar="PROJECT", help="the project")
    parser.add_argument("--model", default=None, help="only calls routed to this model")
    parser.add_argument("--json", action="store_true", help="the row as JSON")


def _listing(parser: Any) -> None:
    parser.add_argument("--project", default=None, help="only this project's")
    parser.add_argument("--history", action="store_true", help="ended rows too")
    parser.add_argument("--limit", type=int, default=1000, help="at most N rows")
    parser.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(parser)


async def _in_project(
    settings: Settings, project_id: str, fn: Callable[[Connection], Awaitable[T]]
) -> T:
    services = await Services.open(settings, db_pool_size=1)
    try:
        return await services.db.in_tenant(project_id, fn)
    finally:
        await services.close()


async def _everywhere(settings: Settings, fn: Callable[[Connection], Awaitable[T]]) -> T:
    services = await Services.open(settings, db_pool_size=1)
    try:
        return await services.db.in_platform(fn)
    finally:
        await services.close()


def view(row: Budget | RateLimit) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(row)
    out["key"] = key_text(row.project_id, row.model)
    return out


async def set_budget(settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    period_s = parse_period(args.period)
    made = await _in_project(
        settings,
        project_id,
        lambda conn: flow_store.set_budget(
            conn,
            project_id,
            model,
            tokens=args.tokens,
            cost=args.cost,
            period_s=period_s,
            reserve_tokens=args.reserve,
            on_exceed=OnExceed(args.on_exceed),
            actor=cli_actor(),
        ),
    )
    print(
        to_json(view(made))
        if args.json
        else f"budget of {key_text(project_id, model)}: "
        f"{made.amount} {made.unit_word} per {made.period_s} s, on exceed {made.on_exceed.value}"
    )
    return 0


async def clear_budget(settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    ended = await _in_project(
        settings,
        project_id,
        lambda conn: flow_store.end_budget(conn, project_id, model, actor=cli_actor()),
    )
    print(to_json(view(ended)) if args.json else f"budget of {key_text(project_id, model)} ended")
    return 0


async def set_limit(settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    period_s = parse_period(args.period)
    made = await _in_project(
        settings,
        project_id,
        lambda conn: flow_store.set_limit(
            conn,
            project_id,
            model,
            limit=args.limit,
            period_s=period_s,
            burst=args.burst,
            actor=cli_actor(),
        ),
    )
    print(
        to_json(view(made))
        if args.json
        else f"rate limit of {key_text(project_id, model)}: "
        f"{made.limit_count} calls per {made.period_s:g} s, burst {made.burst}"
    )
    return 0


async def clear_limit(settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    ended = await _in_project(
        settings,
        project_id,
        lambda conn: flow_store.end_limit(conn, project_id, model, actor=cli_actor()),
    )
    key = key_text(project_id, model)
    print(to_json(view(ended)) if args.json else f"rate limit of {key} ended")
    return 0


def _list_args(args: argparse.Namespace) -> str | None:
    if args.limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    return None if args.project is None else check_project_id(args.project)


async def list_budgets(settings: Settings, args: argparse.Namespace) -> int:
    project_id = _list_args(args)
    found = await _everywhere(
        settings,
        lambda conn: flow_store.budgets(conn, project_id, history=args.history, limit=args.limit),
    )
    if args.json:
        print(to_json([view(b) for b in found]))
        return 0
    rows = [
        [
            key_text(b.project_id, b.model),
            f"{b.amount} {b.unit_word}",
            f"{b.period_s}s",
            b.on_exceed.value,
            describe_budget(b) if b.valid_to is None else "-",
            b.set_by,
            when(b.valid_from),
            when(b.valid_to),
        ]
        for b in found
    ]
    header = ["KEY", "BUDGET", "PERIOD", "ON_EXCEED", "DETAIL", "SET_BY", "FROM", "TO"]
    print(table(header, rows, wide=args.wide))
    return 0


async def list_limits(settings: Settings, args: argparse.Namespace) -> int:
    project_id = _list_args(args)
    found = await _everywhere(
        settings,
        lambda conn: flow_store.limits(conn, project_id, history=args.history, limit=args.limit),
    )
    if args.json:
        print(to_json([view(r) for r in found]))
        return 0
    rows = [
        [
            key_text(r.project_id, r.model),
            str(r.limit_count),
            f"{r.period_s:g}s",
            str(r.burst),
            str(r.granted),
            r.set_by,
            when(r.valid_from),
            when(r.valid_to),
        ]
        for r in found
    ]
    header = ["KEY", "LIMIT", "PERIOD", "BURST", "GRANTED", "SET_BY", "FROM", "TO"]
    print(table(header, rows, wide=args.wide))
    return 0
