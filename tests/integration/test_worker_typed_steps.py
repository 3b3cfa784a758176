"""Typed step results on real Postgres with an in-process worker (awooop.worker.step_values):
the attempt that runs a step and every attempt that replays it get the same type; a value
JSON cannot hold, or over AWOOOP_STEP_RESULT_MAX_BYTES, is refused before anything is
journaled (the step runs again on retry); a recorded result decodes into a type that gained a
defaulted field, and one that no longer fits fails the run naming the step and the field."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunFailed, StepCompleted
from awooop.runs import control
from awooop.worker.context import RunContext
from awooop.worker.runtime import Worker
from tests.support.runs import create_runs, events_of, journaled_by_a_dead_worker, load

P = "proj-typed"


class Line(msgspec.Struct, frozen=True):
    sku: str
    due: datetime
    price: Decimal


class Draft(msgspec.Struct, frozen=True):
    title: str
    lines: list[Line]
    tags: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Invoice:
    number: int
    issued: date
    total: Decimal
    paid_at: datetime | None = None


WHEN = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
# One step per supported kind: (name, the value its function returns, type=).
CASES: list[tuple[str, Any, Any]] = [
    ("struct", Draft("d", [Line("a", WHEN, Decimal("9.90"))], frozenset({"x"})), Draft),
    ("dataclass", Invoice(7, date(2026, 12, 1), Decimal("19.80"), WHEN), Invoice),
    ("datetime", datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2))), datetime),
    ("naive_datetime", datetime(2026, 1, 2, 3, 4, 5), datetime),
    ("decimal", Decimal("0.1000000000000000000000001"), Decimal),
    ("bytes", b"\x00\xffbinary", bytes),
    ("uuid", uuid.UUID(int=42), uuid.UUID),
    ("list_of_structs", [Line("b", WHEN, Decimal(1)), Line("c", WHEN, Decimal(2))], list[Line]),
    ("dict_of_decimals", {"net": Decimal("1.5"), "tax": Decimal("0.3")}, dict[str, Decimal]),
    ("int_keys", {1: "one", 2: "two"}, dict[int, str]),
    ("tuple", (1, "a", WHEN), tuple[int, str, datetime]),
    ("json", {"a": [1, "x", None, True, 1.5], "b": {}}, None),
    # Without type= a Struct is JSON on the first attempt too (what a replay gets).
    ("untyped_struct", Line("d", WHEN, Decimal("3.30")), None),
]
UNTYPED = {"untyped_struct": {"sku": "d", "due": "2026-12-05T09:30:00Z", "price": "3.30"}}


async def run_twice(
    db: Database, settings: Settings, handler: Callable[[RunContext], Awaitable[Any]]
) -> uuid.UUID:
    """One run of ``handler``: its first attempt raises at the end (FAILED), the operator
    retries it, the second attempt completes."""
    [run_id] = await create_runs(db, P, payload={})
    w = Worker(db=db, settings=settings, handler=handler, concurrency=2)
    assert await w.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert state.status == "FAILED", (state.status, state.failure_reason)
    await db.in_tenant(P, lambda c: control.retry(c, run_id, actor="test", extra_attempts=1))
    assert await w.run_until_idle(max_s=60) == 1
    return run_id


async def test_every_supported_type_is_the_same_on_the_first_attempt_and_on_replay(
    db: Database, fast: Settings
) -> None:
    calls: Counter[str] = Counter()
    seen: dict[int, dict[str, Any]] = {}

    async def handler(run: RunContext) -> str:
        got: dict[str, Any] = {}
        for name, value, type_ in CASES:

            async def make(name: str = name, value: Any = value) -> Any:
                calls[name] += 1
                return value

            got[name] = await run.step(name, make, type=type_)

        async def call_tool() -> Line:
            calls["tool"] += 1
            return Line("tool", WHEN, Decimal("4.20"))

        got["tool"] = await run.wait_for_tool("lookup", call_tool, type=Line)
        seen[run.attempt] = got
        if run.attempt == 1:
            raise RuntimeError("fail after the steps")
        return "done"

    run_id = await run_twice(db, fast, handler)
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED" and state.result == "done"
    assert calls == dict.fromkeys([name for name, _, _ in CASES] + ["tool"], 1)  # replayed
    expected = {name: UNTYPED.get(name, value) for name, value, _ in CASES}
    expected["tool"] = Line("tool", WHEN, Decimal("4.20"))
    for attempt in (1, 2):
        for name, value in expected.items():
            got = seen[attempt][name]
            assert type(got) is type(value), (attempt, name, got)
            assert got == value, (attempt, name, got)
    assert seen[1]["naive_datetime"].tzinfo is None and seen[2]["naive_datetime"].tzinfo is None
    # Journaled as JSON: what Postgres holds is the same on both paths.
    assert state.saga_steps["struct"]["result"]["lines"][0]["due"] == "2026-12-05T09:30:00Z"
    assert state.saga_steps["tool:lookup"]["result"]["price"] == "4.20"


async def test_pydantic_models_are_the_same_on_the_first_attempt_and_on_replay(
    db: Database, fast: Settings
) -> None:
    pydantic = pytest.importorskip(
        "pydantic",
        reason="pydantic is not installed in this venv (optional: step_values never imports it)",
    )

    class Address(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        city: str
        since: datetime

    class Customer(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str
        addresses: list[Address]
        credit: Decimal = Decimal(0)

    value = Customer(name="c", addresses=[Address(city="Oslo", since=WHEN)], credit=Decimal("5"))
    seen: dict[int, Any] = {}

    async def handler(run: RunContext) -> None:
        seen[run.attempt] = (
            await run.step("customer", lambda: _returns(value), type=Customer),
            await run.step("addresses", lambda: _returns(value.addresses), type=list[Address]),
        )
        if run.attempt == 1:
            raise RuntimeError("fail after the steps")

    await run_twice(db, fast, handler)
    for attempt in (1, 2):
        customer, addresses = seen[attempt]
        assert type(customer) is Customer and customer == value
        assert [type(a) for a in addresses] == [Address] and addresses == value.addresses


async def _returns(value: Any) -> Any:
    return value


async def test_an_unstorable_value_is_refused_before_the_step_is_journaled(
    db: Database, fast: Settings
) -> None:
    calls: Counter[int] = Counter()

    class Opaque:  # no JSON form
        pass

    async def handler(run: RunContext) -> str:
        async def draft() -> dict[str, Any]:
            calls[run.attempt] += 1
            due: Any = Opaque() if run.attempt == 1 else "2026-12-24"
            return {"items": [{"due": "2026-12-20"}] * 3 + [{"due": due}]}

        drafted = await run.step("draft", draft)
        return str(drafted["items"][3]["due"])

    [run_id] = await create_runs(db, P, payload={})
    w = Worker(db=db, settings=fast, handler=handler, concurrency=1)
    assert await w.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-DATA-001")
    assert state.failure_reason == (
        "UnstorableValueError: step 'draft': result.items[3].due: Opaque is not storable as JSON"
    )
    assert "draft" not in state.saga_steps
    events = await events_of(db, P, run_id)
    assert not [e for e in events if isinstance(e, StepCompleted)]  # nothing journaled
    [failed] = [e for e in events if isinstance(e, RunFailed)]
    assert failed.step == "draft"

    await db.in_tenant(P, lambda c: control.retry(c, run_id, actor="test", extra_attempts=1))
    assert await w.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", "2026-12-24")
    assert calls == {1: 1, 2: 1}  # the step ran again: nothing of attempt 1 was recorded
    assert state.saga_steps["draft"]["attempt"] == 2


async def test_a_step_result_over_the_size_limit_is_refused(db: Database, fast: Settings) -> None:
    limited = msgspec.structs.replace(fast, step_result_max_bytes=1024)

    async def handler(run: RunContext) -> None:
        await run.step("small", lambda: _returns("x" * 1000))  # 1,002 bytes as JSON
        await run.step("page", lambda: _returns({"html": "x" * 2000}))

    [run_id] = await create_runs(db, P, payload={})
    w = Worker(db=db, settings=limited, handler=handler, concurrency=1)
    assert await w.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-DATA-002")
    assert state.failure_reason is not None
    assert state.failure_reason.startswith(
        "StepResultTooLargeError: step 'page': the result is 2,011 bytes as JSON, over the "
        "limit of 1,024 (AWOOOP_STEP_RESULT_MAX_BYTES)"
    )
    assert set(state.saga_steps) == {"small"}


@pytest.mark.parametrize("parent", [False, True], ids=["run", "child-run"])
@pytest.mark.connections(10)
async def test_a_runs_result_is_bounded_and_checked_as_a_steps_is(
    db: Database, fast: Settings, parent: bool
) -> None:
    """A run's result is one event that every replay, projector and stream reads: too large
    (E-DATA-002) or not storable (E-DATA-001), the run fails and no result is recorded, on
    the batched completion and on a child run's single write alike."""
    limited = msgspec.structs.replace(fast, step_result_max_bytes=1024)

    async def handler(run: RunContext) -> Any:
        return {"big": {"page": "x" * 2000}, "nan": {"score": float("nan")}, "ok": {"n": 1}}[
            run.input["give"]
        ]

    gives = ("big", "nan", "ok")
    run_ids = [(await create_runs(db, P, payload={"give": give}))[0] for give in gives]
    if parent:  # as the children of a run (their completion is written alone)
        async with db.platform_writes() as conn:
            await conn.execute(
                "UPDATE awooop_run_state SET parent_run_id = $1 WHERE run_id = ANY($2)",
                uuid.uuid4(),
                run_ids,
            )
    w = Worker(db=db, settings=limited, handler=handler, concurrency=3)
    assert await w.run_until_idle(max_s=60) == 3
    big, nan, ok = [await load(db, P, r) for r in run_ids]
    assert (big.status, big.failure_code, big.result) == ("FAILED", "E-DATA-002", None)
    assert big.failure_reason is not None and "the run's result: the result is 2," in (
        big.failure_reason
    )
    assert (nan.status, nan.failure_code, nan.result) == ("FAILED", "E-DATA-001", None)
    assert (ok.status, ok.result) == ("COMPLETED", {"n": 1})
    for run_id in run_ids[:2]:
        events = await events_of(db, P, run_id)
        assert not [e for e in events if type(e).__name__ == "RunCompleted"]


class DraftV1(msgspec.Struct):
    title: str


class DraftV2(msgspec.Struct):  # DraftV1 with a field added, with a default
    title: str
    tags: list[str] = []
    due: datetime | None = None


async def test_an_old_result_decodes_into_a_type_with_a_new_defaulted_field(
    db: Database, fast: Settings
) -> None:
    old = await journaled_by_a_dead_worker(db, P, "draft", msgspec.to_builtins(DraftV1("before")))
    broken = await journaled_by_a_dead_worker(db, P, "draft", {"title": 42})
    seen: dict[uuid.UUID, Any] = {}
    calls: Counter[uuid.UUID] = Counter()

    async def handler(run: RunContext) -> str:
        async def draft() -> DraftV2:
            calls[run.run_id] += 1
            return DraftV2("again")

        seen[run.run_id] = await run.step("draft", draft, type=DraftV2)
        return "done"

    w = Worker(db=db, settings=fast, handler=handler, concurrency=2)
    assert await w.run_until_idle(max_s=60) == 2
    assert seen[old] == DraftV2("before", [], None)
    assert (await load(db, P, old)).status == "COMPLETED"
    state = await load(db, P, broken)
    assert (state.status, state.failure_code) == ("FAILED", "E-HANDLER-004")
    assert state.failure_reason == (
        "StepResultTypeError: step 'draft': the recorded result does not fit DraftV2: "
        "Expected `str`, got `int` - at `result.title`"
    )
    assert broken not in seen and calls == {}  # neither step ran again
