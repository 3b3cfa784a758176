"""The concurrency key language: parsing, evaluation, fallbacks (awooop.runs.concurrency_rules)."""

from __future__ import annotations

from typing import Any

import pytest

from awooop.core.errors import InvalidInputError
from awooop.runs.concurrency_rules import (
    MAX_KEY_CHARS,
    NO_KEY,
    Limit,
    check_limit,
    evaluate,
    key_text,
    limit_value,
    parse,
    run_key,
)

NAMES: dict[str, Any] = {
    "project": "acme",
    "channel": "api",
    "input": {"customer_id": "c-1", "tier": "premium", "n": 3, "tags": ["a", "b"]},
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("input.customer_id", "c-1"),
        ('input["customer_id"]', "c-1"),
        ("input.tags[1]", "b"),
        ("input.tags[7]", None),
        ("input.missing", None),
        ("input.missing.deeper", None),
        ("input.customer_id.deeper", None),
        ("project", "acme"),
        ("channel", "api"),
        ('input.missing ?? "anonymous"', "anonymous"),
        ('input.tier == "premium" ? 10 : 1', 10),
        ("input.tier == 'free' ? 10 : 1", 1),
        ("input.n >= 3 && input.n < 4", True),
        ("input.n > 3 || !(input.n == 3)", False),
        ('input.n == "3"', False),
        ('input.n < "4"', False),
        ("(1)", 1),
        ("-2", -2),
        ('"say \\"hi\\""', 'say "hi"'),
        ("null ?? false ? 1 : 2", 2),
    ],
)
def test_evaluate(text: str, value: Any) -> None:
    assert evaluate(parse(text), NAMES) == value


@pytest.mark.parametrize(
    "text",
    ["", "input.", "nope", "1 +", "input.a ? 1", "(1", "input[", "__import__('os')", "1 2", "x.y"],
)
def test_bad_expressions_are_config_errors(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse(text)


def test_key_text_fallbacks() -> None:
    assert key_text(None) == NO_KEY
    assert key_text("c-1") == "c-1"
    assert key_text(42) == "42"
    assert key_text({"b": 1, "a": 2}) == '{"a":2,"b":1}'
    long = key_text("x" * 1000)
    assert len(long) == MAX_KEY_CHARS and long != key_text("x" * 999)


@pytest.mark.parametrize(
    ("value", "limit"), [(3, 3), (0, 1), (-1, 1), (None, 1), ("5", 1), (True, 1), (10**9, 1)]
)
def test_limit_value(value: Any, limit: int) -> None:
    assert limit_value(value) == limit


def test_run_key_scopes_the_key_and_computes_the_max() -> None:
    limit = Limit("contract:orders", "input.customer_id", 'input.tier == "premium" ? 10 : 1')
    assert run_key(limit, "acme", "api", NAMES["input"]) == run_key(
        limit, "acme", "api", dict(NAMES["input"])
    )
    got = run_key(limit, "acme", "api", NAMES["input"])
    assert (got.scope, got.key, got.max) == ("contract:orders", "contract:orders/c-1", 10)
    other = run_key(limit, "acme", "api", {"tier": "free"})
    assert (other.key, other.max) == (f"contract:orders/{NO_KEY}", 1)
    assert run_key(limit, "acme", "api", "not an object").key == f"contract:orders/{NO_KEY}"


def test_check_limit() -> None:
    good = Limit("channel:api", "input.a", "2", global_max=5, depth_cap=100)
    assert check_limit(good) is good
    with pytest.raises(InvalidInputError):
        check_limit(Limit("channel:api", "input.", "2"))
    with pytest.raises(InvalidInputError):
        check_limit(Limit("channel:api", "input.a", "2", depth_cap=0))
