"""The pure rules of model-call rate limits and budgets (awooop.llm.flow_rules)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from awooop.core.errors import InvalidInputError
from awooop.llm.flow_rules import (
    Budget,
    OnExceed,
    charge,
    check_limit,
    check_model,
    key_text,
    parse_period,
    reservation,
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
