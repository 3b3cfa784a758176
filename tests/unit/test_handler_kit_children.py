"""Child runs in the in-memory handler kit (awooop.testing.children): each child a kit run of its
own with its contract's handler; the parent's wait ends from the children's states, as on
Postgres; a failed child counts with its outcome; the bound on unfinished children; a timeout;
the first N; replay from the journal."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from awooop.core.errors import ChildrenWaitTimeoutError
from awooop.core.events import ChildrenFinished, RunClaimed, RunCreated, WaitStarted
from awooop.eventlog.child_state import dedupe_key
from awooop.eventlog.state import RunStatus
from awooop.testing import HandlerKit
from awooop.worker.context import RunContext

KEYS = ("a", "b", "c")


async def double(run: RunContext) -> dict[str, Any]:
    """The ``double`` contract's handler: fails for a negative number."""
    n = int(run.input["n"])
    if n < 0:
        raise ValueError(f"cannot double {n}")
    return {"doubled": await run.step("double", lambda: _value(2 * n))}


async def needs_approval(run: RunContext) -> str:
    """The ``approved`` contract's handler: waits for a person."""
    await run.wait_for_approval("go")
    return "approved"


async def _value(v: int) -> int:
    return v


def parent(inputs: dict[str, int], *, contract: str = "double", **wait: Any) -> Any:
    async def handle(run: RunContext) -> list[dict[str, Any]]:
        handles = [await run.start_child(contract, {"n": n}, key=key) for key, n in inputs.items()]
        results = await run.wait_for_children(handles, **wait)
        return [
            {"key": r.key, "status": r.status, "result": r.result, "code": r.failure_code}
            for r in results
        ]

    return handle


async def test_children_run_with_their_contracts_handler_and_the_parent_gets_their_results() -> (
    None
):
    kit = HandlerKit(parent({"a": 1, "b": 2, "c": 3}), children={"double": double})
    result = await kit.run()
    assert result.value == [
        {"key": k, "status": "COMPLETED", "result": {"doubled": 2 * n}, "code": None}
        for k, n in zip(KEYS, (1, 2, 3), strict=True)
    ]
    assert result.journal.step_names == ["child:a", "child:b", "child:c", "children:1"]
    assert sorted(kit.children) == list(KEYS)
    child = kit.children["b"]
    [created] = child.journal.of_type(RunCreated)
    assert created.parent_run_id == kit.state.run_id and created.contract_id == "double"
    assert created.provider_event_id == dedupe_key(kit.state.run_id, "b")
    handle = result.journal.steps["child:b"]
    assert handle["run_id"] == str(child.state.run_id) and handle["contract"] == "double"


async def test_the_parent_waits_holding_nothing_until_its_children_finish() -> None:
    kit = HandlerKit(parent({"a": 1, "b": 2}), children={"double": double}, start_children=False)
    result = await kit.run()
    assert result.status is RunStatus.WAITING_EVENT
    [wait] = result.journal.of_type(WaitStarted)
    assert wait.kind == "children" and wait.needed == 2 and len(wait.children) == 2
    assert {c.state.status for c in kit.children.values()} == {RunStatus.PENDING}
    assert (await kit.resume()).status is RunStatus.WAITING_EVENT  # nothing finished yet
    await kit.children["a"].resume()
    assert (await kit.resume()).status is RunStatus.WAITING_EVENT  # one of two
    await kit.children["b"].resume()
    result = await kit.resume()
    assert [r["result"] for r in result.value] == [{"doubled": 2}, {"doubled": 4}]
    [finished] = result.journal.of_type(ChildrenFinished)
    assert finished.finished == 2 and finished.step == "children:1"
    # the second attempt replayed the handles: no child was started twice
    assert len(kit.children) == 2 and len(result.journal.of_type(RunClaimed)) == 2


async def test_a_failed_child_counts_as_finished_with_its_outcome() -> None:
    kit = HandlerKit(parent({"a": 1, "b": -1}), children={"double": double})
    result = await kit.run()
    assert result.value[1] == {
        "key": "b",
        "status": "FAILED",
        "result": None,
        "code": "E-HANDLER-001",
    }
    assert kit.children["b"].state.status is RunStatus.FAILED


async def test_the_bound_on_unfinished_children_refuses_the_next_and_writes_nothing() -> None:
    kit = HandlerKit(
        parent({"a": 1, "b": 2, "c": 3}),
        children={"double": double},
        start_children=False,
        children_pending_max=2,
    )
    result = await kit.run()
    assert result.status is RunStatus.FAILED and result.failure_code == "E-CHILD-002"
    assert result.journal.step_names == ["child:a", "child:b"] and sorted(kit.children) == [
        "a",
        "b",
    ]


async def test_a_wait_times_out_on_the_kit_clock() -> None:
    async def handle(run: RunContext) -> str:
        child = await run.start_child("approved", {}, key="slow")
        try:
            await run.wait_for_children([child], timeout=timedelta(minutes=5))
        except ChildrenWaitTimeoutError as exc:
            return exc.code
        return "finished"

    kit = HandlerKit(handle, children={"approved": needs_approval})
    assert (await kit.run()).status is RunStatus.WAITING_EVENT
    assert kit.children["slow"].state.status is RunStatus.WAITING_APPROVAL
    kit.advance(timedelta(minutes=5))
    assert (await kit.resume()).value == "E-CHILD-001"


async def test_the_first_n_and_a_childs_approval_given_by_the_test() -> None:
    async def handle(run: RunContext) -> list[str]:
        handles = [
            await run.start_child("double", {"n": 1}, key="fast"),
            await run.start_child("approved", {}, key="slow"),
        ]
        first = await run.wait_for_children(handles, count=1, name="first")
        everything = await run.wait_for_children(handles, name="all")
        return [r.status for r in first] + [r.status for r in everything]

    kit = HandlerKit(handle, children={"double": double, "approved": needs_approval})
    result = await kit.run()
    assert result.status is RunStatus.WAITING_EVENT  # the first wait ended at once, not "all"
    assert result.journal.steps["children:first"][1]["status"] == "WAITING_APPROVAL"
    slow = kit.children["slow"]
    slow.approve("go", actor="lead")
    assert (await slow.resume()).value == "approved"
    result = await kit.resume()
    assert result.value == ["COMPLETED", "WAITING_APPROVAL", "COMPLETED", "COMPLETED"]


async def test_a_recorded_journal_with_children_replays_without_starting_them() -> None:
    kit = HandlerKit(parent({"a": 1, "b": 2}), children={"double": double})
    recorded = (await kit.run()).journal
    fresh = HandlerKit(parent({"a": 1, "b": 2}), children={"double": double})
    report = await fresh.replay(recorded)
    assert report.replayed == ["child:a", "child:b", "children:1"] and report.ran == []
    assert len(fresh.children) == 0
    assert report.result.value == (await kit.resume()).value


async def test_a_wait_for_a_run_that_is_not_a_child_is_refused() -> None:
    async def handle(run: RunContext) -> None:
        await run.start_child("double", {"n": 1}, key="a")
        stranger = {"run_id": "00000000-0000-0000-0000-000000000001", "key": "x", "contract": "c"}
        await run.wait_for_children([stranger])  # type: ignore[list-item]

    result = await HandlerKit(handle, children={"double": double}).run()
    assert result.failure_code == "E-INPUT-001"
    with pytest.raises(Exception, match="not a child of this run"):
        result.value  # noqa: B018 - raises the handler's error


async def test_large_results_are_left_in_the_children_and_read_back_by_the_wait() -> None:
    async def big(run: RunContext) -> str:
        return "x" * 100_000

    kit = HandlerKit(
        parent({"a": 1, "b": 2, "c": 3}), children={"double": big}, start_children=False
    )
    await kit.run()
    for key in KEYS:
        await kit.children[key].resume()
    result = await kit.resume()
    assert [r["result"] for r in result.value] == ["x" * 100_000] * 3
    [finished] = result.journal.of_type(ChildrenFinished)
    assert all(r["result"] is None and r["result_in_child"] for r in finished.results)
    # a replay of that journal without its children says what it needs
    report = await HandlerKit(parent({"a": 1, "b": 2, "c": 3})).replay(result.journal)
    assert "this kit did not run that child" in str(report.result.error)
