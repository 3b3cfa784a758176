"""``awooop projects price``: a project's prices of its models, what its budgets in cost count
(flow control, scope ``awooop_llm``; the budgets: :mod:`awooop.commands.projects_flow`).

    awooop projects price set PROJECT --model M --input X --output Y [--json]
    awooop projects price clear PROJECT --model M [--json]
    awooop projects price list [--project P] [--history] [--limit N] [--json] [--wide]

A price is in credits (the unit the project chooses, e.g. micro-dollars) per 1,000 input
tokens and per 1,000 output tokens, at most 6 decimals. ``set`` replaces the price in force
(the old one is kept as history, ``list --history``); ``clear`` ends it (exit 1, E-BUDGET-003,
when there is none): calls to that model under a budget in cost then fail with E-BUDGET-004.
Who acted is recorded as ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from awooop.commands.output import table, to_json, when
from awooop.commands.projects_flow import _everywhere, _in_project, _list_args, _listing
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.ingest.credentials import check_project_id
from awooop.llm import flow_store
from awooop.llm.flow_rules import Price, check_model, key_text


def register(sub: Any) -> None:
    price = sub.add_parser("price", help="a project's prices of its models (budgets in cost)")
    psub = price.add_subparsers(dest="price_command", required=True, metavar="ACTION")
    pset = psub.add_parser(
        "set",
        help="set a model's price (replaces the one in force)",
        description="set a model's price (replaces the one in force)",
    )
    _target(pset)
    pset.add_argument("--input", required=True, help="credits per 1,000 input tokens")
    pset.add_argument("--output", required=True, help="credits per 1,000 output tokens")
    pset.set_defaults(run=set_price)
    pclear = psub.add_parser(
        "clear", help="end a model's price", description="end a model's price in force"
    )
    _target(pclear)
    pclear.set_defaults(run=clear_price)
    plist = psub.add_parser("list", help="prices in force", description="prices in force")
    _listing(plist)
    plist.set_defaults(run=list_prices)


def _target(parser: Any) -> None:
    parser.add_argument("project", metavar="PROJECT", help="the project")
    parser.add_argument("--model", required=True, help="the model (as the policy routes to it)")
    parser.add_argument("--json", action="store_true", help="the row as JSON")


def view(row: Price) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(row)
    out["key"] = key_text(row.project_id, row.model)
    out["input_price"], out["output_price"] = float(row.input_price), float(row.output_price)
    return out


def describe(p: Price) -> str:
    return f"{p.input_price.normalize():f} in, {p.output_price.normalize():f} out per 1,000 tokens"


async def set_price(settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    made = await _in_project(
        settings,
        project_id,
        lambda conn: flow_store.set_price(
            conn,
            project_id,
            model,
            input_price=args.input,
            output_price=args.output,
            actor=cli_actor(),
        ),
    )
    key = key_text(project_id, model)
    print(to_json(view(made)) if args.json else f"price of {key}: {describe(made)} (credits)")
    return 0


async def clear_price(settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    ended = await _in_project(
        settings,
        project_id,
        lambda conn: flow_store.end_price(conn, project_id, model, actor=cli_actor()),
    )
    print(to_json(view(ended)) if args.json else f"price of {key_text(project_id, model)} ended")
    return 0


async def list_prices(settings: Settings, args: argparse.Namespace) -> int:
    project_id = _list_args(args)
    found = await _everywhere(
        settings,
        lambda conn: flow_store.prices(conn, project_id, history=args.history, limit=args.limit),
    )
    if args.json:
        print(to_json([view(p) for p in found]))
        return 0
    rows = [
        [
            key_text(p.project_id, p.model),
            f"{p.input_price.normalize():f}",
            f"{p.output_price.normalize():f}",
            p.set_by,
            when(p.valid_from),
            when(p.valid_to),
        ]
        for p in found
    ]
    header = ["KEY", "INPUT/1K", "OUTPUT/1K", "SET_BY", "FROM", "TO"]
    print(table(header, rows, wide=args.wide))
    return 0
