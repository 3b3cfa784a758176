"""Child runs in the journal: pure parts shared by the run write path, the worker and the reads
(``run.start_child``, ``run.wait_for_children``; docs/workers.md, Child runs).

- A child run is created by intake with the dedupe key :func:`dedupe_key` (``child:<parent run
  id>:<key>``, in the parent's project, channel ``api``), so that one parent's key names one
  child; it carries its parent's run id (``RunCreated.parent_run_id``). The parent journals
  its :class:`ChildHandle` under the step ``child:<key>`` in the transaction that creates it.
- A wait for children is decided from the children's committed states, never from a counter:
  :func:`satisfied` says whether ``needed`` of them have finished (COMPLETED, FAILED or
  CANCELLED: a failed or cancelled child counts, with its outcome), and :func:`outcomes`
  gives each child's :class:`ChildResult` in the order of the handles. The wait's journal
  entry (``children:<n>``) keeps those outcomes, so a replay returns the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

CHILD_STEP_PREFIX = "child:"
CHILDREN_STEP_PREFIX = "children:"
CHILD_CHANNEL = "api"  # the channel of every child run (its dedupe key is in that channel)
DEDUPE_PREFIX = "child:"
FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
REASON_MAX = 2000  # a failed child's reason, as its outcome keeps it (characters)
# The children's results one wait's journal entry keeps, in all (bytes of JSON): beyond it the
# entry keeps the outcomes without them and the wait reads them back from the children's rows
# (a completed child's result never changes), so that a wait for many children with large
# results is not one event of children x AWOOOP_STEP_RESULT_MAX_BYTES.
RESULTS_INLINE_MAX_BYTES = 256 * 1024


class ChildHandle(msgspec.Struct, frozen=True, kw_only=True):
    """A child run as ``run.start_child`` returns it (and its journal keeps it)."""

    run_id: uuid.UUID
    key: str
    contract: str


class ChildResult(msgspec.Struct, frozen=True, kw_only=True):
    """A child's outcome as ``run.wait_for_children`` returns it: ``status`` COMPLETED (with
    ``result``), FAILED (``failure_code``, ``failure_reason``) or CANCELLED; or, for a child
    that had not finished when a wait for the first N ended, its status then (``finished``
    False)."""

    run_id: uuid.UUID
    key: str
    status: str
    result: Any = None
    failure_code: str | None = None
    failure_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def ok(self) -> bool:
        return self.status == "COMPLETED"


def dedupe_key(parent_run_id: uuid.UUID, key: str) -> str:
    """Pure: the intake key (``provider_event_id``) of ``parent_run_id``'s child ``key``."""
    return f"{DEDUPE_PREFIX}{parent_run_id}:{key}"


def key_of(provider_event_id: str, parent_run_id: uuid.UUID | None) -> str:
    """Pure: a child's key, from its intake key (:func:`dedupe_key`); the whole id otherwise."""
    prefix = f"{DEDUPE_PREFIX}{parent_run_id}:"
    return provider_event_id.removeprefix(prefix) if parent_run_id else provider_event_id


def needed_of(count: int | None, total: int) -> int:
    """Pure: how many of ``total`` children a wait needs finished: all (``count`` None) or the
    first ``count``; ValueError unless 1 <= count <= total."""
    if count is None:
        return total
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= total:
        raise ValueError(f"count is between 1 and the number of children ({total})")
    return count


def finished_count(statuses: Sequence[str]) -> int:
    """Pure: how many of ``statuses`` are finished (COMPLETED, FAILED or CANCELLED)."""
    return sum(1 for s in statuses if s in FINISHED)


def satisfied(statuses: Sequence[str], needed: int) -> bool:
    """Pure: whether a wait that needs ``needed`` finished children is over, given the
    children's statuses."""
    return finished_count(statuses) >= needed


def outcome_of(row: Any) -> ChildResult:
    """Pure: a child's outcome from its row (``run_id``, ``provider_event_id``,
    ``parent_run_id``, ``status``, ``result``, ``failure_code``, ``failure_reason``)."""
    status = str(row["status"])
    reason = row["failure_reason"]
    return ChildResult(
        run_id=row["run_id"],
        key=key_of(row["provider_event_id"], row["parent_run_id"]),
        status=status,
        result=row["result"] if status == "COMPLETED" else None,
        failure_code=row["failure_code"] if status != "COMPLETED" else None,
        failure_reason=None if reason is None or status == "COMPLETED" else reason[:REASON_MAX],
    )


def outcomes(order: Sequence[uuid.UUID], rows: Sequence[Any]) -> list[ChildResult]:
    """Pure: the outcomes of the children ``order`` names, in that order (a child without a
    row, which cannot be in a committed wait, raises KeyError)."""
    by_id = {row["run_id"]: outcome_of(row) for row in rows}
    return [by_id[run_id] for run_id in order]


def encoded(
    results: Sequence[ChildResult], inline_max: int = RESULTS_INLINE_MAX_BYTES
) -> list[Any]:
    """Pure: outcomes as the journal keeps them (JSON builtins): with their results when these
    come to at most ``inline_max`` bytes of JSON in all, else every completed child's result
    left in its row (``"result_in_child": true``, :func:`filled` puts it back)."""
    journaled = [msgspec.to_builtins(r) for r in results]
    size = sum(len(msgspec.json.encode(r.result)) for r in results if r.result is not None)
    if size > inline_max:
        for entry in journaled:
            if entry["status"] == "COMPLETED":
                entry.update(result=None, result_in_child=True)
    return journaled


def left_in_children(journaled: Any) -> list[uuid.UUID]:
    """Pure: the children whose results a journaled wait left in their rows."""
    return [uuid.UUID(str(e["run_id"])) for e in journaled or [] if e.get("result_in_child")]


def filled(journaled: Any, stored: Mapping[uuid.UUID, Any]) -> list[ChildResult]:
    """Pure: a journaled wait's outcomes, the results it left in the children's rows taken from
    ``stored`` (run id -> result); KeyError for one ``stored`` lacks."""
    whole = [
        {**e, "result": stored[uuid.UUID(str(e["run_id"]))]} if e.get("result_in_child") else e
        for e in journaled or []
    ]
    return decoded(whole)


def decoded(journaled: Any) -> list[ChildResult]:
    """Pure: outcomes from the journal (:func:`encoded`)."""
    return msgspec.convert(journaled or [], list[ChildResult])


def handle_of(journaled: Any) -> ChildHandle:
    """Pure: a handle from the journal (a ``child:<key>`` step's result)."""
    return msgspec.convert(journaled, ChildHandle)
