"""The pure rules of model-call rate limits and budgets (awooop.llm.flow_rules)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec
import pytest

from awooop.core.errors import InvalidInputError
from awooop.llm.flow_rules import (
    Budget,
    BudgetUnit,
    OnExceed,
    Ticket,
    charge,
    charges,
    check_budget,
    check_limit,
    check_model,
    check_price,
    cost_of,
    describe_budget,
    key_text,
    parse_period,
    reservation,
    reserved_cost,
)

BUDGET = Budget(
    budget_id=uuid.uuid4(),
    project_id="p",
    model="",
    tokens=1000,
    period_s=3600,
    reserve_tokens=64,
    on_exceed=OnExceed.WAIT,
    set_by="t",
    valid_from=datetime(2026, 1, 1, tzinfo=UTC),
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("second", 1),
        ("hour", 3600),
        ("Day", 86400),
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1w", 604800),
        ("30", 30),
    ],
)
def test_periods(text: str, seconds: int) -> None:
    assert parse_period(text) == seconds


@pytest.mark.parametrize("text", ["", "fortnight", "0s", "-1h", "h", "1.5h"])
def test_bad_periods_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_period(text)


@pytest.mark.parametrize(
    ("options", "reserved"),
    [
        ({}, 64),
        ({"max_tokens": 5}, 5),
        ({"num_predict": 300}, 300),
        ({"max_tokens": 0}, 64),
        ({"max_tokens": True}, 64),
        ({"max_tokens": "12"}, 64),
    ],
)
def test_a_call_reserves_its_max_tokens_or_the_budget_default(
    options: dict[str, Any], reserved: int
) -> None:
    assert reservation(options, BUDGET) == reserved


def test_a_call_is_charged_what_the_model_reported() -> None:
    assert charge(50, True, 3, 2) == 5
    assert charge(50, True, 7, None) == 7
    assert charge(50, True, None, None) == 50  # no counts reported: the reservation
    assert charge(50, False, None, None) == 0  # no answer: nothing


def test_limits_keys_and_models() -> None:
    assert check_limit(10, 1.0, None) == 10 and check_limit(10, 1.0, 2) == 2
    for bad in ((0, 1.0, None), (1, 0.0, None), (1, 1.0, 0)):
        with pytest.raises(InvalidInputError):
            check_limit(*bad)
    assert key_text("p", "") == "awooop_llm:p" and key_text("p", "m") == "awooop_llm:p:m"
    assert check_model(None) == "" and check_model("m") == "m"
    with pytest.raises(InvalidInputError):
        check_model("")


def test_a_budget_is_tokens_or_cost_never_both() -> None:
    assert check_budget(100, 5) == (BudgetUnit.TOKENS, 100)
    assert check_budget(None, 5, cost=7) == (BudgetUnit.COST, 7)
    for tokens, cost in ((None, None), (1, 1), (-1, None), (None, -1)):
        with pytest.raises(InvalidInputError):
            check_budget(tokens, 5, cost)


def test_prices_are_non_negative_with_at_most_six_decimals() -> None:
    assert check_price("m", "2.5", 0) == ("m", Decimal("2.5"), Decimal(0))
    assert check_price("m", Decimal("0.000001"), "1e3")[2] == Decimal(1000)
    for model, pin in ((None, "1"), ("m", "-1"), ("m", "0.0000001"), ("m", "x"), ("m", "nan")):
        with pytest.raises(InvalidInputError):
            check_price(model, pin, "1")


def test_cost_reserves_at_the_higher_price_and_charges_each_side_at_its_own() -> None:
    pin, pout = Decimal("2000"), Decimal("3000")  # credits per 1,000 tokens
    assert reserved_cost(5, pin, pout) == 15
    assert cost_of(3, 2, pin, pout) == 12
    assert cost_of(1, 0, Decimal("0.5"), pout) == 1  # rounded up to a whole credit
    assert cost_of(None, None, pin, pout) == 0
    ticket = Ticket(
        1,
        reserved={"": 50, "m": 150},
        units={"": BudgetUnit.TOKENS, "m": BudgetUnit.COST},
        tokens={"": 50, "m": 50},
        price=(pin, pout),
    )
    assert charges(ticket, True, 3, 2) == {"": 5, "m": 12}
    assert charges(ticket, True, None, None) == {"": 50, "m": 150}  # no counts: the reservation
    assert charges(ticket, False, None, None) == {"": 0, "m": 0}
    budget = msgspec.structs.replace(BUDGET, unit=BudgetUnit.COST, cost=90)
    assert describe_budget(budget).startswith("0 of 90 credits used")
