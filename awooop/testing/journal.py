"""The journal a :class:`~awooop.testing.HandlerKit` run wrote: the run's events, as the real
runtime writes them on the run's stream, folded by the real state machine
(:func:`awooop.eventlog.state.apply`), with views to assert on."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.errors import InvalidInputError
from awooop.core.events import (
    ApprovalExpired,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    Event,
    ModelCalled,
    RunEvent,
    RunRequeued,
    RunRetried,
    SignalDelivered,
    StepCompleted,
    TimerFired,
    ToolResultReceived,
    WaitStarted,
    event_type,
)
from awooop.eventlog.state import RunState, RunStatus, fold
from awooop.worker.context import APPROVAL_STEP_PREFIX
from awooop.worker.durable_waits import EVENT_STEP_PREFIX
from awooop.worker.tool_waits import TOOL_STEP_PREFIX

ApprovalEvent = ApprovalRequested | ApprovalGranted | ApprovalRejected | ApprovalExpired
WaitEvent = WaitStarted | TimerFired | SignalDelivered
_list_decoder: msgspec.json.Decoder[list[RunEvent]] = msgspec.json.Decoder(list[RunEvent])


class Journal(Sequence[Event]):
    """The events of one run, oldest first (a sequence of :mod:`awooop.core.events`)."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._events: list[Event] = list(events)

    def __len__(self) -> int:
        return len(self._events)

    def __getitem__(self, index: Any) -> Any:
        return self._events[index]

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    def __repr__(self) -> str:
        return f"Journal({self.types})"

    # --- views -------------------------------------------------------------------------------

    @property
    def state(self) -> RunState:
        """The run's row as the real runtime folds these events."""
        state = fold(list(self._events))
        assert state is not None, "an empty journal has no run"
        return state

    @property
    def types(self) -> list[str]:
        return [event_type(e) for e in self._events]

    @property
    def step_events(self) -> list[StepCompleted]:
        """Every journaled step, tools' (``tool:<name>``) and approvals'
        (``approval:<name>``) included, in the order they were written."""
        return [e for e in self._events if isinstance(e, StepCompleted)]

    @property
    def steps(self) -> dict[str, Any]:
        """The results of the handler's own steps (``run.step``) by name, as journaled."""
        return {
            e.step: e.result
            for e in self.step_events
            if not e.step.startswith((TOOL_STEP_PREFIX, APPROVAL_STEP_PREFIX, EVENT_STEP_PREFIX))
        }

    @property
    def step_names(self) -> list[str]:
        return [e.step for e in self.step_events]

    @property
    def model_calls(self) -> list[ModelCalled]:
        return [e for e in self._events if isinstance(e, ModelCalled)]

    @property
    def tool_calls(self) -> list[ToolResultReceived]:
        """The tool answers written (one per answered ``run.wait_for_tool``)."""
        return [e for e in self._events if isinstance(e, ToolResultReceived)]

    @property
    def tools(self) -> dict[str, Any]:
        return {e.tool: e.result for e in self.tool_calls}

    @property
    def approvals(self) -> list[ApprovalEvent]:
        return [e for e in self._events if isinstance(e, ApprovalEvent)]

    @property
    def waits(self) -> list[WaitEvent]:
        """The durable waits: each ``WaitStarted`` (``run.sleep``, ``run.wait_for_event``)
        and what ended it (``TimerFired``, ``SignalDelivered``). A wait a kept signal answered
        at once is a step (``event:<name>:<n>``) in :attr:`step_events`."""
        return [e for e in self._events if isinstance(e, WaitEvent)]

    def of_type(self, type_: type[Any]) -> list[Any]:
        return [e for e in self._events if isinstance(e, type_)]

    # --- keeping a journal -------------------------------------------------------------------

    def to_json(self) -> bytes:
        """The events as JSON (each with its ``type`` tag): a recorded journal to keep next
        to a test and replay against later code (:meth:`from_json`)."""
        return msgspec.json.encode(self._events)

    @classmethod
    def from_json(cls, data: bytes | str) -> Journal:
        return cls(_list_decoder.decode(data))


LEASED = (RunStatus.RUNNING, RunStatus.WAITING_TOOL)


def reopening(state: RunState, now: datetime) -> RunEvent | None:
    """The event that hands a recorded run to the next attempt, as a worker of a new release
    takes a run in flight: a leased run is requeued, a failed one (an approval ended it)
    retried by an operator; a run still waiting is refused."""
    if state.status is RunStatus.WAITING_APPROVAL:
        raise InvalidInputError("the journal waits for an approval: replay it once decided")
    if state.status is RunStatus.WAITING_EVENT:
        raise InvalidInputError("the journal waits (a sleep, an event): replay it once woken")
    if state.status in LEASED:
        reason = "replayed against new handler code"
        return RunRequeued(
            at=now, attempt=state.attempt_count, worker_id=state.worker_id, reason=reason
        )
    if state.status is RunStatus.FAILED:
        return RunRetried(at=now, actor="kit", max_attempts=state.attempt_count + 1)
    return None
