"""The attempts this process holds, as the worker's parts share them: :class:`Attempt` (one
attempt of one run under its lease: the local lease deadline, the handler task), the timers
that stop attempts whose local deadlines passed (:class:`Deadlines`),
why an attempt stops (:class:`StopReason`), the stream entry that delivered it, and the trace
context every write of an attempt carries (:func:`trace_metadata`). What a handler sees of its
attempt is :class:`awooop.worker.context.RunContext`.
"""

from __future__ import annotations

import asyncio
import enum
import math
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from awooop.core.telemetry import inject

# The ``traceparent`` of the running attempt's ``run`` span while that span is exported
# (recorded and sampled): every event the attempt writes carries it as ``run_span``, and the
# next attempt links to it (:mod:`awooop.worker.tracelinks`).
RUN_SPAN: ContextVar[str | None] = ContextVar("awooop_run_span", default=None)


class StopReason(enum.StrEnum):
    LOST = "lost"  # the lease is gone (heartbeat found it missing, or it ran out)
    CANCELLED = "cancelled"  # an operator cancelled the run
    SHUTDOWN = "shutdown"  # the worker is stopping; the lease is handed back


@dataclass(frozen=True, slots=True)
class StreamEntry:
    stream: str
    entry_id: str


@dataclass(eq=False, slots=True)  # one per run in flight: no instance dict
class Attempt:
    """A lease this process holds: one attempt of one run."""

    run_id: uuid.UUID
    project_id: str
    worker_id: str
    number: int
    lease_deadline: float  # time.monotonic(): the lease is surely valid before this
    entry: StreamEntry | None = None
    task: asyncio.Task[Any] | None = None
    stop_reason: StopReason | None = None
    finishing: bool = False  # writing its last event: a missing lease is expected now
    started: float = field(default_factory=time.monotonic)
    # The step the handler is in now and when it started (the worker's clock): the heartbeat
    # writes it with each renewal, so that a long step shows while it runs.
    step: str | None = None
    step_started_at: datetime | None = None
    # The innermost step an exception left, to name the failing step (see step_of).
    raised_in: tuple[BaseException, str] | None = None
    # A child run's parent: its completion is a transaction that may resume the parent
    # (awooop.worker.last_writes), not the one-statement completion.
    parent_run_id: uuid.UUID | None = None
    # The slot of Deadlines whose timer stops it when its local deadline passes (None: none).
    deadline_slot: DeadlineSlot | None = None
    # Under a worker session: when the run's own lease was last confirmed (monotonic: the
    # claim's or renewal's send), and the step the last renewal wrote (awooop.worker.heartbeat).
    run_confirmed: float = 0.0
    step_written: tuple[str, datetime] | None = None

    def enter_step(self, name: str) -> tuple[str | None, datetime | None]:
        """The handler starts step ``name`` now; returns the step it was in (a step may run
        inside another), for :meth:`leave_step`."""
        outer = (self.step, self.step_started_at)
        self.step, self.step_started_at = name, datetime.now(UTC)
        return outer

    def leave_step(self, outer: tuple[str | None, datetime | None]) -> None:
        self.step, self.step_started_at = outer

    def step_raised(self, exc: BaseException, name: str) -> None:
        """``exc`` left step ``name``. An exception that an inner step already noted (itself,
        or one raised from it) keeps the inner step's name."""
        if self.raised_in is not None and any(e is self.raised_in[0] for e in causes(exc)):
            return
        self.raised_in = (exc, name)

    def step_of(self, exc: BaseException) -> str | None:
        """The step the handler was in when ``exc`` (or the exception it was raised from)
        was raised; None when it was raised outside every step."""
        if self.raised_in is not None and any(e is self.raised_in[0] for e in causes(exc)):
            return self.raised_in[1]
        return None

    def live(self) -> bool:
        return self.stop_reason is None and time.monotonic() < self.lease_deadline

    def stop(self, reason: StopReason) -> bool:
        """Cancel the handler for ``reason``; False if it was already stopping or finishing."""
        if self.stop_reason is not None or self.finishing:
            return False
        self.stop_reason = reason
        if self.task is not None and not self.task.done():
            self.task.cancel(f"attempt stopped: {reason}")
        return True


# --- local lease deadlines -------------------------------------------------------------------
# An attempt's local deadline (awooop.worker.heartbeat: the confirmed send + TTL - the safety
# margin, monotonic clock) only moves later. When it passes, a timer on the event loop, not the
# return of any I/O call, stops the attempt. The timers are shared: deadlines fall into slots
# of SLOT_S seconds, each slot one timer that fires at the slot's start, so at most SLOT_S
# before a deadline in it and never after. A heartbeat round confirms its leases in a few
# statements, each giving its leases one deadline: thousands of attempts in flight need a
# handful of timers, not one each (a timer handle, its libuv timer, its context and arguments
# weigh about half a kilobyte).

SLOT_S: Final = 0.05


class DeadlineSlot:
    """The attempts whose deadlines fall in one slot, and the timer that stops them."""

    __slots__ = ("attempts", "key", "timer")

    def __init__(self, key: int) -> None:
        self.key = key
        self.attempts: dict[Attempt, None] = {}  # insertion order: stopped in that order
        self.timer: asyncio.TimerHandle | None = None


class Deadlines:
    """The local lease deadlines of the attempts a process holds, one timer per slot."""

    def __init__(self, on_deadline: Callable[[Attempt], None]) -> None:
        self._on_deadline = on_deadline
        self._slots: dict[int, DeadlineSlot] = {}

    def __len__(self) -> int:
        """The timers armed now (one per slot that holds an attempt)."""
        return len(self._slots)

    def hold_until(self, attempt: Attempt, deadline: float) -> None:
        """Move ``attempt``'s local deadline (monotonic clock) to ``deadline`` if later, and
        arm the timer that stops it when the deadline passes."""
        if attempt.deadline_slot is not None and deadline <= attempt.lease_deadline:
            return
        attempt.lease_deadline = max(attempt.lease_deadline, deadline)
        key = math.floor(attempt.lease_deadline / SLOT_S)
        if attempt.deadline_slot is not None and attempt.deadline_slot.key == key:
            return
        self.disarm(attempt)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = DeadlineSlot(key)
            delay = max(0.0, key * SLOT_S - time.monotonic())
            slot.timer = asyncio.get_running_loop().call_later(delay, self._fire, slot)
        slot.attempts[attempt] = None
        attempt.deadline_slot = slot

    def disarm(self, attempt: Attempt) -> None:
        """``attempt`` has ended: no timer stops it any more."""
        slot = attempt.deadline_slot
        if slot is None:
            return
        attempt.deadline_slot = None
        slot.attempts.pop(attempt, None)
        if not slot.attempts and self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
            if slot.timer is not None:
                slot.timer.cancel()

    def _fire(self, slot: DeadlineSlot) -> None:
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        attempts, slot.attempts = slot.attempts, {}
        for attempt in attempts:
            attempt.deadline_slot = None
            try:
                self._on_deadline(attempt)
            except Exception as exc:  # the others in the slot are stopped all the same
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "stopping an attempt at its deadline failed", "exception": exc}
                )


class InStep:
    """``with InStep(attempt, name) as started_at``: ``attempt``'s handler is in step ``name``
    for the block (an exception that leaves it is noted as raised in it); one small object, not
    a generator (a run in flight is inside one while its model call waits)."""

    __slots__ = ("_attempt", "_name", "_outer")

    def __init__(self, attempt: Attempt, name: str) -> None:
        self._attempt = attempt
        self._name = name
        self._outer: tuple[str | None, datetime | None] = (None, None)

    def __enter__(self) -> datetime:
        self._outer = self._attempt.enter_step(self._name)
        started_at = self._attempt.step_started_at
        assert started_at is not None
        return started_at

    def __exit__(
        self, _kind: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> None:
        if exc is not None:
            self._attempt.step_raised(exc, self._name)
        self._attempt.leave_step(self._outer)


def causes(exc: BaseException) -> list[BaseException]:
    """Pure: ``exc`` and the exceptions it was raised from or while handling, newest first
    (each once: a chain may loop)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and not any(current is seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def trace_metadata() -> dict[str, Any]:
    traceparent, tracestate = inject()
    meta: dict[str, Any] = {}
    if traceparent:
        meta["traceparent"] = traceparent
    if tracestate:
        meta["tracestate"] = tracestate
    run_span = RUN_SPAN.get()
    if run_span:
        meta["run_span"] = run_span
    return meta
