"""The attempts this process holds, as the worker's parts share them: :class:`Attempt` (one
attempt of one run under its lease: the local lease deadline and its timer, the handler task),
why an attempt stops (:class:`StopReason`), the stream entry that delivered it, and the trace
context every write of an attempt carries (:func:`trace_metadata`). What a handler sees of its
attempt is :class:`awooop.worker.context.RunContext`.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from awooop.core.telemetry import inject

# The ``traceparent`` of the running attempt's ``run`` span while that span is exported
# (recorded and sampled): every event the attempt writes carries it as ``run_span``, and the
# next attempt links to it (:mod:`awooop.worker.tracelinks`).
RUN_SPAN: ContextVar[str | None] = ContextVar("awooop_run_span", default=None)


class StopReason(enum.StrEnum):
    LOST = "lost"  # the lease is gone (heartbeat found it missing, or it ran out)
    CANCELLED = "cancelled"  # an operator cancelled the run
    SHUTDOWN = "shutdown"  # the worker is stopping; the lease is handed back


@dataclass(frozen=True)
class StreamEntry:
    stream: str
    entry_id: str


@dataclass(eq=False)
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
    _deadline_timer: asyncio.TimerHandle | None = None

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

    def hold_until(self, deadline: float, on_deadline: Callable[[Attempt], None]) -> None:
        """Move the local lease deadline (monotonic clock) to ``deadline`` if later, and arm a
        timer on the event loop that calls ``on_deadline`` when it passes. The timer, not any
        I/O call returning, is what stops an attempt that can no longer renew."""
        if self._deadline_timer is not None and deadline <= self.lease_deadline:
            return
        self.lease_deadline = max(self.lease_deadline, deadline)
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        delay = max(0.0, self.lease_deadline - time.monotonic())
        self._deadline_timer = asyncio.get_running_loop().call_later(delay, on_deadline, self)

    def disarm(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    def stop(self, reason: StopReason) -> bool:
        """Cancel the handler for ``reason``; False if it was already stopping or finishing."""
        if self.stop_reason is not None or self.finishing:
            return False
        self.stop_reason = reason
        if self.task is not None and not self.task.done():
            self.task.cancel(f"attempt stopped: {reason}")
        return True


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
