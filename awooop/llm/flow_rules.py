"""Rate limits and budgets of model calls, as pure decisions (flow control, scope
``awooop_llm``).

A **rate limit** is a token bucket per project and model ('' = every model of the project):
``limit`` calls per ``period_s`` seconds, at most ``burst`` at once. A **budget** is a number
of tokens (input plus output, as the model client reports them) per period per project and
model, or (``unit`` cost) a number of credits per period, the calls' tokens at the project's
**price** of the model (credits per 1,000 input and per 1,000 output tokens; a credit is the
unit the project chooses, e.g. a micro-dollar). A call reserves its maximum before it starts
(its ``max_tokens`` or ``num_predict`` option, else the budget's ``reserve_tokens``; in cost,
those tokens at the higher of the model's two prices) and is settled to what it used. Over
budget the call waits for the next period or fails with E-BUDGET-001, as the budget says
(``on_exceed``); a call under a cost budget to a model without a price fails with E-BUDGET-004.
:mod:`awooop.llm.flow_store` stores them, :mod:`awooop.llm.admission` enforces them.
"""

from __future__ import annotations

import enum
import math
import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec

from awooop.core.errors import InvalidInputError

SCOPE = "awooop_llm"
MAX_MODEL = 200
PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
RESERVE_OPTIONS = ("max_tokens", "num_predict")
PER_TOKENS = 1000  # prices are credits per 1,000 tokens
MAX_PRICE = Decimal("100000000000000")  # numeric(20, 6)


class OnExceed(enum.StrEnum):
    WAIT = "wait"
    FAIL = "fail"


class WaitReason(enum.StrEnum):
    RATE_LIMITED = "rate_limited"
    OVER_BUDGET = "over_budget"


class BudgetUnit(enum.StrEnum):
    TOKENS = "tokens"
    COST = "cost"


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    limit_id: uuid.UUID
    project_id: str
    model: str
    limit_count: int
    period_s: float
    burst: int
    set_by: str
    valid_from: datetime
    granted: int = 0
    valid_to: datetime | None = None
    ended_by: str | None = None
    available: float | None = None  # the tokens its bucket holds now (a row in force)


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    budget_id: uuid.UUID
    project_id: str
    model: str
    tokens: int
    period_s: int
    reserve_tokens: int
    on_exceed: OnExceed
    set_by: str
    valid_from: datetime
    valid_to: datetime | None = None
    ended_by: str | None = None
    unit: BudgetUnit = BudgetUnit.TOKENS
    cost: int | None = None  # credits per period (unit cost; tokens is then 0)
    # The current period (reads only): its bounds and its counter, in the budget's unit.
    period_start: datetime | None = None
    period_end: datetime | None = None
    used: int = 0
    reserved: int = 0
    calls: int = 0

    @property
    def amount(self) -> int:
        """The budget per period in its unit: tokens, or credits."""
        return self.cost if self.unit is BudgetUnit.COST and self.cost is not None else self.tokens

    @property
    def unit_word(self) -> str:
        return "credits" if self.unit is BudgetUnit.COST else "tokens"


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """A project's price of one model: credits per 1,000 input and output tokens."""

    price_id: uuid.UUID
    project_id: str
    model: str
    input_price: Decimal
    output_price: Decimal
    set_by: str
    valid_from: datetime
    valid_to: datetime | None = None
    ended_by: str | None = None


def check_model(model: str | None) -> str:
    """Pure: the model scope a command names ('' for every model of the project)."""
    if model is None:
        return ""
    if not model or len(model) > MAX_MODEL:
        raise InvalidInputError(f"model must be 1-{MAX_MODEL} characters")
    return model


def parse_period(text: str) -> int:
    """Pure: seconds of a period: ``second|minute|hour|day|week`` or ``<n>s|m|h|d|w``."""
    word = text.strip().lower()
    if word in PERIODS:
        return PERIODS[word]
    number, unit = word[:-1], word[-1:]
    if unit in UNITS and number.isdigit() and int(number) > 0:
        return int(number) * UNITS[unit]
    if word.isdigit() and int(word) > 0:
        return int(word)
    raise InvalidInputError(
        f"period {text!r}: expected second|minute|hour|day|week or N followed by s|m|h|d|w"
    )


def check_limit(limit: int, period_s: float, burst: int | None) -> int:
    """Pure: the burst of a valid rate limit (default: the limit itself)."""
    if limit < 1:
        raise InvalidInputError("a rate limit allows at least 1 call per period")
    if period_s <= 0:
        raise InvalidInputError("a rate limit's period must be positive")
    burst = limit if burst is None else burst
    if burst < 1:
        raise InvalidInputError("burst must be at least 1")
    return burst


def check_budget(
    tokens: int | None, reserve_tokens: int, cost: int | None = None
) -> tuple[BudgetUnit, int]:
    """Pure: the unit and amount of a budget that names exactly one of tokens and cost."""
    if (tokens is None) == (cost is None):
        raise InvalidInputError("a budget is either --tokens N or --cost N (credits)")
    if reserve_tokens < 1:
        raise InvalidInputError("--reserve must be at least 1 token")
    if cost is not None:
        if cost < 0:
            raise InvalidInputError("a cost budget is 0 or more credits")
        return BudgetUnit.COST, cost
    assert tokens is not None
    if tokens < 0:
        raise InvalidInputError("a budget is 0 or more tokens")
    return BudgetUnit.TOKENS, tokens


def check_price(
    model: str | None, input_price: Decimal | str | float, output_price: Decimal | str | float
) -> tuple[str, Decimal, Decimal]:
    """Pure: the model and the two prices (credits per 1,000 tokens, at most 6 decimals) of a
    valid price."""
    if not model:
        raise InvalidInputError("a price names its model (--model M)")
    model = check_model(model)
    prices = []
    for name, value in (("input", input_price), ("output", output_price)):
        try:
            price = Decimal(str(value))
        except ArithmeticError:
            raise InvalidInputError(f"the {name} price {value!r} is not a number") from None
        if not price.is_finite() or price < 0 or price >= MAX_PRICE:
            raise InvalidInputError(
                f"the {name} price is 0 or more credits per 1,000 tokens (below {MAX_PRICE})"
            )
        if price != price.quantize(Decimal("0.000001")):
            raise InvalidInputError(f"the {name} price has at most 6 decimals")
        prices.append(price)
    return model, prices[0], prices[1]


def key_text(project_id: str, model: str) -> str:
    """Pure: the key a limit or budget is known by: ``awooop_llm:<project>[:<model>]``."""
    return f"{SCOPE}:{project_id}" + (f":{model}" if model else "")


def view(row: RateLimit | Budget | Price) -> dict[str, Any]:
    """Pure: a row as the CLI's ``--json`` and the routes show it: its fields, its ``key``
    (:func:`key_text`), and a price's two prices as numbers."""
    body: dict[str, Any] = msgspec.to_builtins(row)
    body["key"] = key_text(row.project_id, row.model)
    if isinstance(row, Price):
        body["input_price"], body["output_price"] = float(row.input_price), float(row.output_price)
    return body


def reservation(options: Mapping[str, Any], budget: Budget) -> int:
    """Pure: the tokens a call reserves on ``budget``: its ``max_tokens`` (or Ollama's
    ``num_predict``) option when it names a positive whole number, else the budget's
    ``reserve_tokens``."""
    for name in RESERVE_OPTIONS:
        value = options.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return budget.reserve_tokens


def reserved_cost(tokens: int, input_price: Decimal, output_price: Decimal) -> int:
    """Pure: the credits a call that reserves ``tokens`` reserves on a cost budget: those
    tokens at the higher of the two prices (whatever the split between input and output, the
    call's reported cost is then within it when its tokens are), rounded up."""
    return math.ceil(tokens * max(input_price, output_price) / PER_TOKENS)


def cost_of(
    input_tokens: int | None, output_tokens: int | None, input_price: Decimal, output_price: Decimal
) -> int:
    """Pure: the credits of a call's reported tokens at their prices, rounded up."""
    total = (input_tokens or 0) * input_price + (output_tokens or 0) * output_price
    return math.ceil(total / PER_TOKENS)


def charge_cost(
    reserved: int,
    answered: bool,
    input_tokens: int | None,
    output_tokens: int | None,
    price: tuple[Decimal, Decimal],
) -> int:
    """Pure: what a settled call costs a cost budget: nothing when it got no answer, its
    reported tokens at the model's prices, or (no counts reported) its reservation."""
    if not answered:
        return 0
    if input_tokens is None and output_tokens is None:
        return reserved
    return cost_of(input_tokens, output_tokens, *price)


def charge(
    reserved: int, answered: bool, input_tokens: int | None, output_tokens: int | None
) -> int:
    """Pure: what a settled call costs its budgets: nothing when it got no answer, the
    reported input plus output tokens, or (the model reported no counts) its reservation."""
    if not answered:
        return 0
    if input_tokens is None and output_tokens is None:
        return reserved
    return (input_tokens or 0) + (output_tokens or 0)


class Ticket(msgspec.Struct, frozen=True):
    """The reservations of one call, per model scope: the amount reserved (in the budget's
    unit), its unit and the tokens it stands for; the model's price when a budget is in cost."""

    seq: int
    reserved: dict[str, int]
    units: dict[str, BudgetUnit]
    tokens: dict[str, int]
    price: tuple[Decimal, Decimal] | None = None


def charges(
    ticket: Ticket, answered: bool, input_tokens: int | None, output_tokens: int | None
) -> dict[str, int]:
    """Pure: what a call costs each budget of its ``ticket``, in the budget's unit. Every
    token budget is charged the same tokens (:func:`charge`); a cost budget the reported
    tokens at the price it reserved with (:func:`charge_cost`)."""
    tokens = charge(max(ticket.tokens.values(), default=0), answered, input_tokens, output_tokens)
    return {
        model: tokens
        if ticket.units[model] is BudgetUnit.TOKENS or ticket.price is None
        else charge_cost(amount, answered, input_tokens, output_tokens, ticket.price)
        for model, amount in ticket.reserved.items()
    }


def describe_budget(b: Budget) -> str:
    """Pure: ``1200 of 10000 tokens used (300 reserved) until <end>`` (credits for a cost
    budget)."""
    end = "-" if b.period_end is None else b.period_end.strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{b.used} of {b.amount} {b.unit_word} used ({b.reserved} reserved) until {end}"
