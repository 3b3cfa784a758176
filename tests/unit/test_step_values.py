"""awooop.worker.step_values: what a step's result becomes in the journal and what the handler
gets back (pure: the worker's side is tests/integration/test_worker_typed_steps.py)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec
import pytest

from awooop.core.errors import StepResultTooLargeError, StepResultTypeError, UnstorableValueError
from awooop.worker.step_values import journal, kept, recorded, unkept


class Opaque:
    pass


class Item(msgspec.Struct):
    due: Any


@dataclasses.dataclass
class Order:
    items: list[Item]
    total: Decimal = Decimal(0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (Order([Item(1), Item(Opaque())]), "step 'x': result.items[1].due: Opaque is not storable"),
        ({"a": [1.0, float("nan")]}, "step 'x': result.a[1]: float nan is not storable as JSON"),
        ([Item(float("-inf"))], "step 'x': result[0].due: float -inf is not storable as JSON"),
        ({"k": {(1, 2): 3}}, "step 'x': result.k[(1, 2)] (a key): tuple as a key is not storable"),
        ({"odd key": object()}, "step 'x': result['odd key']: object is not storable as JSON"),
        (Opaque(), "step 'x': result: Opaque is not storable as JSON"),
        ({"t": "a\ud800"}, "step 'x' result could not be stored: result['t']: text 'a\\ud800'"),
    ],
)
def test_a_value_json_cannot_hold_is_refused_naming_its_place(value: Any, message: str) -> None:
    with pytest.raises(UnstorableValueError) as refused:
        journal("step 'x'", value, None)
    assert refused.value.code == "E-DATA-001"
    assert refused.value.message.startswith(message), refused.value.message


def test_none_is_stored_and_only_a_non_finite_float_is_refused() -> None:
    assert journal("step 'x'", {"a": None, "b": 1.5}, None) == ({"a": None, "b": 1.5},) * 2


@pytest.mark.parametrize(
    "value",
    [
        {"a": None, "floats": [1.5, -0.0, 1e308, -1e308, 5e-324, float("-1e-300")]},
        Order([Item(None), Item(2.5)]),
        # bytes that look like a non-finite float to the msgpack filter, and an integer
        # msgpack cannot hold (the walk decides both)
        {"raw": b"\xcb\x7f\xf0", "big": 2**70, "n": None},
    ],
)
def test_a_finite_value_holding_none_is_stored_as_json_has_it(value: Any) -> None:
    as_json = msgspec.json.decode(msgspec.json.encode(value))
    assert journal("step 'x'", value, None) == (as_json, as_json)


@pytest.mark.parametrize(
    ("value", "place"),
    [
        ({"n": None, "f": -float("nan")}, "result.f: float nan"),
        ({"n": None, "big": 2**70, "f": float("inf")}, "result.f: float inf"),
        (
            {"n": None, "deep": [[{"x": [None, float("-inf")]}]]},
            "result.deep[0][0].x[1]: float -inf",
        ),
    ],
)
def test_a_non_finite_float_beside_a_none_is_refused_naming_its_place(
    value: Any, place: str
) -> None:
    with pytest.raises(UnstorableValueError) as refused:
        journal("step 'x'", value, None)
    assert refused.value.message == f"step 'x': {place} is not storable as JSON"


def test_the_size_limit_counts_json_bytes() -> None:
    assert journal("step 'x'", "x" * 8, None, max_bytes=10)[0] == "x" * 8  # 10 bytes as JSON
    with pytest.raises(StepResultTooLargeError) as refused:
        journal("step 'x'", "x" * 9, None, max_bytes=10)
    assert refused.value.code == "E-DATA-002"
    assert refused.value.message.startswith(
        "step 'x': the result is 11 bytes as JSON, over the limit of 10"
    )


def test_the_first_attempt_gets_what_a_replay_gets() -> None:
    when = datetime(2026, 12, 5, tzinfo=UTC)
    value = Order([Item(when)], Decimal("1.10"))
    stored, live = journal("step 'x'", value, Order)
    assert stored == {"items": [{"due": "2026-12-05T00:00:00Z"}], "total": "1.10"}
    assert (
        live
        == recorded("step 'x'", stored, Order)
        == Order([Item("2026-12-05T00:00:00Z")], Decimal("1.10"))
    )
    assert journal("step 'x'", value, None) == (stored, stored)  # untyped: JSON builtins
    assert journal("step 'x'", {1: b"\x00"}, dict[int, bytes])[1] == {1: b"\x00"}


def test_a_value_that_does_not_fit_its_type_names_the_field() -> None:
    with pytest.raises(StepResultTypeError) as first:
        journal("step 'x'", {"items": [{"due": 1}], "total": "oops"}, Order)
    assert first.value.code == "E-HANDLER-004"
    assert first.value.message == (
        "step 'x': the result does not fit Order: Invalid decimal string - at `result.total`"
    )
    with pytest.raises(StepResultTypeError) as replay:
        recorded("step 'x'", {"total": "1"}, Order)
    assert replay.value.message == (
        "step 'x': the recorded result does not fit Order: Object missing required field "
        "`items` - at `result`"
    )


def test_a_pydantic_model_round_trips_and_names_the_field_that_does_not_fit() -> None:
    pydantic = pytest.importorskip(
        "pydantic",
        reason="pydantic is not installed in this venv (optional: step_values never imports it)",
    )

    class City(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str
        population: int = 0

    stored, live = journal("step 'x'", [City(name="Oslo")], list[City])
    assert stored == [{"name": "Oslo", "population": 0}] and live == [City(name="Oslo")]
    with pytest.raises(StepResultTypeError) as replay:
        recorded("step 'x'", {"c": [{"name": 1}]}, dict[str, list[City]])
    assert replay.value.message.endswith(
        ": Input should be a valid string - at `result[...][0].name`"
    )


def test_a_result_kept_while_its_attempt_runs_is_its_json_and_reads_back_the_same() -> None:
    stored, _ = journal("step 'x'", {"text": "hi", "n": 1, "items": [1.5, None, "é"]}, None)
    held = kept(stored)
    assert isinstance(held, bytes)
    assert unkept(held) == stored
    assert unkept(stored) is stored  # a replayed result, as the journal gave it
    assert recorded("step 'x'", unkept(held), None) == stored
