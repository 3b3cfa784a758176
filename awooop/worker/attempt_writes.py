"""What an attempt's parts hold of it: :class:`AttemptWrites` (its fenced writes, its lease
check and the step names it used).

:class:`awooop.worker.context.RunContext` owns the parts of an attempt (its model calls and
their flow gate, its waits, its child runs) and they call back into it. They hold this object
rather than the context's own bound methods: a run's objects then form no reference cycle, and
reference counting frees all of them the moment the run ends. (In a cycle, they waited for the
cyclic collector: a run in flight survives its young collections, so its objects were freed by
a full collection only, and a worker held every run that ended before it as well as those in
flight.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from awooop.core.errors import DuplicateStepError, LeaseLostError
from awooop.core.events import Event
from awooop.eventlog.state import RunState
from awooop.runs import leases
from awooop.worker.attempts import Attempt, trace_metadata

Make = Callable[[RunState, datetime], Event | tuple[Event, ...]]
# Journal events made at the write's clock (leases.Journal): a model call, a step's result.
MakeJournal = Callable[[datetime], Event | tuple[Event, ...]]


class AttemptWrites:
    __slots__ = ("_attempt", "_used", "_writer")

    def __init__(
        self,
        attempt: Attempt,
        writer: Callable[[leases.FencedWrite], Awaitable[RunState | None]],
    ) -> None:
        self._attempt = attempt
        self._writer = writer
        self._used: dict[str, None] = {}  # the step names used (a dict: smaller than a set)

    def check(self) -> None:
        """Raise E-RUN-002 if the attempt no longer holds a live lease."""
        attempt = self._attempt
        if not attempt.live():
            reason = attempt.stop_reason or "the lease ran out before a heartbeat renewed it"
            raise LeaseLostError(f"attempt stopped: {reason}", run_id=attempt.run_id)

    def use(self, name: str) -> None:
        """A step name is used once per run: E-HANDLER-003 the second time."""
        if name in self._used:
            raise DuplicateStepError(step=name, run_id=self._attempt.run_id)
        self._used[name] = None

    async def write(self, make: Make) -> RunState | None:
        """The events ``make`` makes, written fenced (checked first: a stopped attempt writes
        nothing more, even where the fence would allow): the run's new state."""
        self.check()
        attempt = self._attempt
        return await self._writer(
            leases.FencedWrite(
                attempt.run_id, attempt.worker_id, attempt.number, make, trace_metadata()
            )
        )

    async def journal(self, events: MakeJournal) -> None:
        """Journal events (a model call, a step's result: :class:`leases.Journal`), made by
        ``events`` at :data:`leases.JOURNAL_CLOCK` and written with the write's clock, fenced
        as :meth:`write` writes, in one statement with other runs' while the run is RUNNING
        (which reads no row back)."""
        self.check()
        attempt = self._attempt
        made = events(leases.JOURNAL_CLOCK)
        await self._writer(
            leases.Journal(
                attempt.run_id,
                attempt.worker_id,
                attempt.number,
                metadata=trace_metadata(),
                events=made if isinstance(made, tuple) else (made,),
            )
        )
