"""What an approval request and its decision may carry besides yes or no (pure checks)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awooop.core.errors import InvalidInputError, StepResultTooLargeError, UnstorableValueError
from awooop.runs import approval_options as options


def test_policies_reasons_and_expiries() -> None:
    assert options.check_policy("on_reject", "return") == "return"
    with pytest.raises(InvalidInputError, match="'fail' or 'return'"):
        options.check_policy("on_reject", "retry")
    assert options.check_reason("r" * 2000) == "r" * 2000
    with pytest.raises(InvalidInputError) as long:
        options.check_reason("r" * 2001)
    assert long.value.code == "E-INPUT-001"
    assert options.expires_in_s(None) is None
    assert options.expires_in_s(timedelta(minutes=2)) == 120.0
    with pytest.raises(InvalidInputError):
        options.expires_in_s(timedelta(0))


def test_edited_payloads_as_text() -> None:
    assert options.parse_payload("p", "  ") is None
    assert options.parse_payload("p", '{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(InvalidInputError, match="p is not valid JSON") as bad:
        options.parse_payload("p", "{nope")
    assert bad.value.code == "E-INPUT-001"
    with pytest.raises(StepResultTooLargeError) as big:
        options.parse_payload("p", '"' + "x" * 100 + '"', max_bytes=50)
    assert big.value.code == "E-DATA-002"
    with pytest.raises(UnstorableValueError) as nul:
        options.parse_payload("p", '{"a": "x\\u0000y"}')
    assert nul.value.code == "E-DATA-001"


def test_payloads_as_values() -> None:
    assert options.check_payload("p", ("a", 1)) == ["a", 1]
    with pytest.raises(UnstorableValueError):
        options.check_payload("p", object())
    with pytest.raises(StepResultTooLargeError):
        options.check_payload("p", {"x": "y" * 100}, max_bytes=20)
