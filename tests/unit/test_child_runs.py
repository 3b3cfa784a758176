"""Child runs' pure parts (awooop.eventlog.child_state): when a wait for all or the first N is
over, each child's outcome in the order of the handles, the dedupe key, and the journal's
shapes; the state machine's journaling of a children wait."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awooop.core import events as ev
from awooop.eventlog import child_state, wait_state
from awooop.eventlog.child_state import ChildHandle, ChildResult
from awooop.eventlog.state import RunStatus, apply
from awooop.testing import HandlerKit
from tests.support.durable_handlers import family
from tests.support.factories import T0, state_in

STATUSES = ["PENDING", "RUNNING", "WAITING_TOOL", "WAITING_APPROVAL", "WAITING_EVENT", "RESUMED",
            "COMPLETED", "FAILED", "CANCELLED"]  # fmt: skip
PARENT = uuid.UUID("11111111-1111-4111-8111-111111111111")


def row(i: int, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": uuid.UUID(int=i + 1),
        "provider_event_id": child_state.dedupe_key(PARENT, f"k{i}"),
        "parent_run_id": PARENT,
        "status": status,
        "result": extra.get("result"),
        "failure_code": extra.get("failure_code"),
        "failure_reason": extra.get("failure_reason"),
    }


@pytest.mark.parametrize(
    ("statuses", "needed", "over"),
    [
        (["COMPLETED", "COMPLETED"], 2, True),
        (["COMPLETED", "RUNNING"], 2, False),
        (["FAILED", "CANCELLED"], 2, True),  # failed and cancelled children count as finished
        (["PENDING", "WAITING_EVENT", "COMPLETED"], 1, True),  # the first one
        (["PENDING", "WAITING_EVENT", "RESUMED"], 1, False),
        (["COMPLETED", "FAILED", "RUNNING"], 2, True),
        (["COMPLETED", "FAILED", "RUNNING"], 3, False),
    ],
)
def test_a_wait_is_over_when_enough_children_have_finished(
    statuses: list[str], needed: int, over: bool
) -> None:
    assert child_state.satisfied(statuses, needed) is over


@given(st.lists(st.sampled_from(STATUSES), min_size=1, max_size=30), st.data())
def test_the_rule_counts_finished_states_and_nothing_else(
    statuses: list[str], data: st.DataObject
) -> None:
    needed = data.draw(st.integers(min_value=1, max_value=len(statuses)))
    finished = sum(1 for s in statuses if s in ("COMPLETED", "FAILED", "CANCELLED"))
    assert child_state.satisfied(statuses, needed) is (finished >= needed)
    # the order the children finished in, or are listed in, does not matter
    assert child_state.satisfied(list(reversed(statuses)), needed) is (finished >= needed)
    assert child_state.satisfied(statuses, len(statuses)) is (finished == len(statuses))


def test_count_is_all_or_the_first_n() -> None:
    assert child_state.needed_of(None, 4) == 4
    assert child_state.needed_of(1, 4) == 1 and child_state.needed_of(4, 4) == 4
    for bad in (0, 5, -1, True):
        with pytest.raises(ValueError, match="between 1 and"):
            child_state.needed_of(bad, 4)


def test_outcomes_come_in_the_order_of_the_handles_whatever_the_rows_order() -> None:
    rows = [
        row(0, "COMPLETED", result={"n": 0}, failure_code="E-OLD-001"),
        row(1, "FAILED", failure_code="E-HANDLER-001", failure_reason="x" * 3000),
        row(2, "CANCELLED", failure_reason="stop"),
        row(3, "RUNNING"),
    ]
    order = [uuid.UUID(int=4), uuid.UUID(int=2), uuid.UUID(int=1), uuid.UUID(int=3)]
    got = child_state.outcomes(order, list(reversed(rows)))
    assert [r.key for r in got] == ["k3", "k1", "k0", "k2"]
    running, failed, done, cancelled = got
    assert done == ChildResult(run_id=uuid.UUID(int=1), key="k0", status="COMPLETED",
                               result={"n": 0})  # fmt: skip
    assert failed.failure_code == "E-HANDLER-001" and failed.result is None
    assert failed.failure_reason == "x" * child_state.REASON_MAX and not failed.ok
    assert cancelled.finished and cancelled.failure_reason == "stop"
    assert not running.finished and running.status == "RUNNING"
    with pytest.raises(KeyError):  # a run that is not the parent's child has no row
        child_state.outcomes([uuid.UUID(int=9)], rows)


def test_the_journal_keeps_outcomes_and_handles_as_json() -> None:
    results = child_state.outcomes([uuid.UUID(int=1)], [row(0, "COMPLETED", result=[1])])
    journaled = child_state.encoded(results)
    assert journaled == [{"run_id": str(uuid.UUID(int=1)), "key": "k0", "status": "COMPLETED",
                          "result": [1], "failure_code": None, "failure_reason": None}]  # fmt: skip
    assert child_state.decoded(journaled) == results
    handle = ChildHandle(run_id=uuid.UUID(int=7), key="a:b", contract="child")
    assert child_state.handle_of({"run_id": str(handle.run_id), "key": "a:b",
                                  "contract": "child"}) == handle  # fmt: skip


def test_a_childs_dedupe_key_names_its_parent_and_key() -> None:
    key = child_state.dedupe_key(PARENT, "a:b")
    assert key == f"child:{PARENT}:a:b"
    assert child_state.key_of(key, PARENT) == "a:b"
    assert child_state.key_of("order-7", None) == "order-7"


def test_a_children_wait_is_journaled_and_ended_by_its_children_or_its_timeout() -> None:
    running = state_in(RunStatus.RUNNING)
    kids = (uuid.UUID(int=1), uuid.UUID(int=2))
    started = ev.WaitStarted(
        at=T0,
        worker_id=running.worker_id or "",
        attempt=1,
        step="children:1",
        kind="children",
        children=kids,
        needed=2,
    )
    waiting = apply(running, started)
    assert waiting.status is RunStatus.WAITING_EVENT and waiting.waiting_for == "children"
    assert (
        waiting.lease_until is None and wait_state.ended(waiting.saga_steps["children:1"]) is None
    )
    results = child_state.encoded(
        child_state.outcomes(kids, [row(0, "COMPLETED"), row(1, "FAILED")])
    )
    done = apply(waiting, ev.ChildrenFinished(at=T0, step="children:1", results=results,
                                              finished=2))  # fmt: skip
    entry = done.saga_steps["children:1"]
    assert done.status is RunStatus.RESUMED and done.waiting_for is None
    assert wait_state.ended(entry) == "children" and entry["result"] == results
    timed_out = apply(waiting, ev.TimerFired(at=T0, step="children:1", kind="children", due_at=T0))
    assert wait_state.ended(timed_out.saga_steps["children:1"]) == "timeout"


async def test_the_in_memory_kit_runs_the_integration_tests_family_handler() -> None:
    """The handler the Postgres tests use, in the kit: three children, one failing; and the
    bound refusing the third start."""
    kit = HandlerKit(family)
    result = await kit.run({"children": 3, "per_child": {"1": {"fail": True}}})
    outcomes = result.value["results"]
    assert [o["status"] for o in outcomes] == ["COMPLETED", "FAILED", "COMPLETED"]
    assert outcomes[2]["result"] == {"i": 2, "twice": 4} and outcomes[1]["failure_code"]
    bounded = HandlerKit(family, start_children=False, children_pending_max=2)
    assert (await bounded.run({"children": 3})).value == {"refused": "E-CHILD-002", "started": 2}


def test_a_waits_entry_keeps_the_results_up_to_a_bound_and_leaves_the_rest_in_the_rows() -> None:
    small = [
        ChildResult(run_id=uuid.UUID(int=1), key="a", status="COMPLETED", result={"n": 1}),
        ChildResult(
            run_id=uuid.UUID(int=2), key="b", status="FAILED", failure_code="E-HANDLER-001"
        ),
    ]
    assert child_state.decoded(child_state.encoded(small)) == small
    assert child_state.left_in_children(child_state.encoded(small)) == []
    third = ChildResult(run_id=uuid.UUID(int=3), key="c", status="COMPLETED", result="x" * 50)
    big = [*small, third]
    journaled = child_state.encoded(big, inline_max=40)
    assert [(e["result"], e.get("result_in_child")) for e in journaled] == [
        (None, True), (None, None), (None, True)
    ]  # fmt: skip
    assert child_state.decoded(journaled)[1] == small[1]  # a failed child's outcome is whole
    assert child_state.left_in_children(journaled) == [uuid.UUID(int=1), uuid.UUID(int=3)]
    stored = {uuid.UUID(int=1): {"n": 1}, uuid.UUID(int=3): "x" * 50}
    assert child_state.filled(journaled, stored) == big
    with pytest.raises(KeyError):
        child_state.filled(journaled, {uuid.UUID(int=1): {"n": 1}})
