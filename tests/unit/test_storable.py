"""What Postgres cannot store, found before a statement (awooop.core.storable): NUL and lone
surrogates anywhere in a JSON value, named by their place; reasons never hold the bad
character themselves."""

from __future__ import annotations

import msgspec
import pytest

from awooop.core.errors import UnstorableValueError
from awooop.core.events import StepCompleted
from awooop.core.storable import encoded_problem, problem, sanitized, unstorable
from awooop.worker.outcomes import failure_of
from tests.support.factories import T0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, "x\x00y"]}, "result['a'][1]: text 'x\\x00y' contains \\u0000 (NUL)"),
        ({"k\x00": 1}, "result (a key): text 'k\\x00' contains \\u0000 (NUL)"),
        (["ok", "\ud800"], "result[1]: text '\\ud800' holds a lone surrogate"),
        ("\x00", "result: text '\\x00' contains \\u0000"),
    ],
)
def test_a_bad_string_is_named_by_its_place(value: object, expected: str) -> None:
    found = problem(value, "result")
    assert found is not None and found.startswith(expected)
    assert "\x00" not in found and sanitized(found) == found


def test_a_long_string_is_shown_as_an_excerpt_around_the_bad_character() -> None:
    text = "a" * 500 + "\x00" + "b" * 500
    found = problem({"body": text}, "result")
    assert found is not None and len(found) < 200
    assert "...'aaaaaaaaaaaaaaaaaaaa\\x00bbbbbbbbbbbbbbbbbbb'..." in found


@pytest.mark.parametrize(
    "value",
    [None, 1, 2.5, True, "", "plain", "accents é ü 日本", "\\u0000 written out", {"a": [{}]}],
)
def test_what_postgres_stores_passes(value: object) -> None:
    assert problem(value) is None
    assert encoded_problem(value) is None


def test_nesting_is_refused_only_beyond_the_given_depth() -> None:
    deep: object = "x"
    for _ in range(5):
        deep = [deep]
    assert problem(deep) is None
    assert problem(deep, max_depth=5) is None
    found = problem(deep, "body", max_depth=4)
    assert found == "body[0][0][0][0]: JSON nesting deeper than 4 levels"


def test_encoded_problem_checks_structs_and_finds_what_the_walk_finds() -> None:
    event = StepCompleted(at=T0, worker_id="w", attempt=1, step="fetch", result={"b": "a\x00"})
    assert encoded_problem(event, "StepCompleted") == problem(
        msgspec.to_builtins(event), "StepCompleted"
    )
    found = encoded_problem(event, "StepCompleted")
    assert found is not None and found.startswith("StepCompleted['result']['b']: text")
    assert encoded_problem({"s": "\ud800"}, "r") == problem({"s": "\ud800"}, "r")
    ok = StepCompleted(at=T0, worker_id="w", attempt=1, step="fetch", result={"b": "a"})
    assert encoded_problem(ok) is None


def test_unstorable_names_what_and_keeps_postgres_detail_without_the_bad_character() -> None:
    own = unstorable("the return value", UnstorableValueError("result['a']: text ..."))
    assert own.code == "E-DATA-001"
    assert own.message == "the return value could not be stored: result['a']: text ..."

    class Refused(Exception):
        detail = "\\u0000 cannot be converted to text."

    pg = unstorable("step 'fetch' result", Refused("unsupported Unicode escape sequence\x00"))
    assert pg.message == (
        "step 'fetch' result could not be stored: Refused: unsupported Unicode escape "
        "sequence\\u0000 (\\u0000 cannot be converted to text.)"
    )


def test_a_failure_reason_is_storable_whatever_the_exception_says() -> None:
    code, reason = failure_of(ValueError("bad \x00 and \ud800"))
    assert code == "E-HANDLER-001"
    assert reason == "ValueError: bad \\u0000 and \\ud800"
    assert problem(reason) is None
