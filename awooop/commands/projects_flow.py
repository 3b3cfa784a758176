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

from typing import Any

from awooop.commands import projects_rows
from awooop.commands.output import when
from awooop.commands.projects_rows import RowVerbs
from awooop.llm import flow_forms, flow_store
from awooop.llm.flow_rules import Budget, OnExceed, describe_budget, key_text


def register(sub: Any) -> None:
    projects_rows.register(sub, BUDGETS)
    projects_rows.register(sub, RATE_LIMITS)


def _budget_options(parser: Any) -> None:
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--tokens", type=int, default=None, help="tokens per period")
    amount.add_argument(
        "--cost", type=int, default=None, help="credits per period (at the model's price)"
    )
    parser.add_argument("--period", default="day", help="second|minute|hour|day|week or Nh...")
    parser.add_argument(
        "--reserve", type=int, default=1024, help="tokens a call without max_tokens reserves"
    )
    parser.add_argument(
        "--on-exceed",
        choices=[o.value for o in OnExceed],
        default=OnExceed.WAIT.value,
        help="wait for the next period (blocked_on over_budget) or fail (E-BUDGET-001)",
    )


def _budget_cells(b: Budget) -> list[str]:
    return [
        key_text(b.project_id, b.model),
        f"{b.amount} {b.unit_word}",
        f"{b.period_s}s",
        b.on_exceed.value,
        describe_budget(b) if b.valid_to is None else "-",
        b.set_by,
        when(b.valid_from),
        when(b.valid_to),
    ]


BUDGETS = RowVerbs(
    help="budgets (tokens or cost) of a project's model calls",
    kind=flow_store.BUDGETS,
    set_help="set the budget (replaces the one in force)",
    clear_help="end the budget in force",
    clear_description="end the budget in force",
    list_help="budgets in force and this period's use",
    model_help="only calls routed to this model",
    options=_budget_options,
    write=flow_forms.budget,
    says=lambda b: f"{b.amount} {b.unit_word} per {b.period_s} s, on exceed {b.on_exceed.value}",
    rows=flow_store.budgets,
    header=["KEY", "BUDGET", "PERIOD", "ON_EXCEED", "DETAIL", "SET_BY", "FROM", "TO"],
    cells=_budget_cells,
)


def _limit_options(parser: Any) -> None:
    parser.add_argument("--limit", type=int, required=True, help="calls per period")
    parser.add_argument("--period", default="second", help="second|minute|hour or Ns...")
    parser.add_argument("--burst", type=int, default=None, help="calls at once (default --limit)")


RATE_LIMITS = RowVerbs(
    help="rate limits of a project's model calls",
    kind=flow_store.LIMITS,
    set_help="set the rate limit (replaces the one in force)",
    clear_help="end the rate limit in force",
    clear_description="end the rate limit in force",
    list_help="rate limits in force",
    model_help="only calls routed to this model",
    options=_limit_options,
    write=flow_forms.limit,
    says=lambda r: f"{r.limit_count} calls per {r.period_s:g} s, burst {r.burst}",
    rows=flow_store.limits,
    header=["KEY", "LIMIT", "PERIOD", "BURST", "GRANTED", "SET_BY", "FROM", "TO"],
    cells=lambda r: [
        key_text(r.project_id, r.model),
        str(r.limit_count),
        f"{r.period_s:g}s",
        str(r.burst),
        str(r.granted),
        r.set_by,
        when(r.valid_from),
        when(r.valid_to),
    ],
)
