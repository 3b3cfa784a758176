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

from typing import Any

from awooop.commands import projects_rows
from awooop.commands.output import when
from awooop.commands.projects_rows import RowVerbs
from awooop.llm import flow_forms, flow_store
from awooop.llm.flow_rules import Price, key_text


def register(sub: Any) -> None:
    projects_rows.register(sub, PRICES)


def _price_options(parser: Any) -> None:
    parser.add_argument("--input", required=True, help="credits per 1,000 input tokens")
    parser.add_argument("--output", required=True, help="credits per 1,000 output tokens")


def describe(p: Price) -> str:
    return f"{p.input_price.normalize():f} in, {p.output_price.normalize():f} out per 1,000 tokens"


PRICES = RowVerbs(
    help="a project's prices of its models (budgets in cost)",
    kind=flow_store.PRICES,
    set_help="set a model's price (replaces the one in force)",
    clear_help="end a model's price",
    clear_description="end a model's price in force",
    list_help="prices in force",
    model_help="the model (as the policy routes to it)",
    options=_price_options,
    write=flow_forms.price,
    says=lambda p: f"{describe(p)} (credits)",
    rows=flow_store.prices,
    header=["KEY", "INPUT/1K", "OUTPUT/1K", "SET_BY", "FROM", "TO"],
    cells=lambda p: [
        key_text(p.project_id, p.model),
        f"{p.input_price.normalize():f}",
        f"{p.output_price.normalize():f}",
        p.set_by,
        when(p.valid_from),
        when(p.valid_to),
    ],
)
