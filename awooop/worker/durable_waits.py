"""``run.sleep``, ``run.sleep_until`` and ``run.wait_for_event``: durable waits that hold no slot.

The attempt ends in the wait like one that waits for approval: ``WaitStarted`` is written
fenced (the run is WAITING_EVENT, its lease released, the wait's row written in the same
transaction: :mod:`awooop.eventlog.waits`) and :class:`Waiting` leaves the handler. The worker
runs nothing of it meanwhile: no slot, no lease, no renewal. The ``timers`` loop
(:mod:`awooop.loops.timers`) writes ``TimerFired`` when the wait is due, or a signal's sender
``SignalDelivered`` (:mod:`awooop.runs.signals`); the run is RESUMED, any worker takes it, the
handler runs from the top (its steps replayed) and the call returns.

Each wait is journaled under its step (:mod:`awooop.eventlog.wait_state`): ``sleep:<n>`` for the
handler's n-th sleep, ``event:<name>:<n>`` for its n-th wait for ``name`` (or the ``name=``
given). The due time (a sleep's, a wait's timeout) is fixed by the database clock when the
wait starts and journaled with it: a replay never sleeps again from scratch, and a journaled
sleep already past its due time returns at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from awooop.core import metrics
from awooop.core.db import Database
from awooop.core.errors import EventWaitTimeoutError, InvalidInputError
from awooop.core.retries import unavailable_on_store_errors
from awooop.eventlog.wait_state import SIGNAL, TIMEOUT, due_of, ended
from awooop.runs import leases, signals
from awooop.worker.approval_waits import Suspended
from awooop.worker.attempts import Attempt, trace_metadata

SLEEP_STEP_PREFIX = "sleep:"
EVENT_STEP_PREFIX = "event:"


class Waiting(Suspended):
    """The attempt ended in a durable wait (raised out of ``sleep`` / ``wait_for_event``)."""


def sleep_due(now: datetime, delay: timedelta | None, until: datetime | None) -> datetime:
    """Pure: when a sleep of ``delay`` from ``now`` (or until ``until``) is due."""
    if until is not None:
        if until.tzinfo is None:
            raise InvalidInputError("sleep_until needs a datetime with a time zone")
        return until
    assert delay is not None
    return now + delay


class AttemptWaits:
    """What the waits of one attempt journal against: the run's recorded steps, the step names
    used, the database (:class:`DurableWaits`, :class:`awooop.worker.child_runs.ChildRuns`)."""

    def __init__(
        self,
        *,
        db: Database,
        attempt: Attempt,
        steps: Mapping[str, Any],  # the run's saga_steps as the attempt began
        use: Callable[[str], None],  # marks a step name used (E-HANDLER-003 on a second use)
        io_timeout_s: float | None,
    ) -> None:
        self._db = db
        self._attempt = attempt
        self._entries = {k: v for k, v in steps.items() if isinstance(v, dict)}
        self._use = use
        self._io_timeout_s = io_timeout_s
        self._counts: Counter[str] = Counter()  # this attempt's waits so far, by kind and name

    def _now(self) -> datetime:
        """The clock a journaled due time is compared with (the test kit's is its own)."""
        return datetime.now(UTC)


class DurableWaits(AttemptWaits):
    """The durable waits of one attempt (module doc). ``writer``: the worker's fenced writes
    (:meth:`awooop.worker.executor.Executor.write`), which writes a sleep's ``WaitStarted``
    (a :class:`awooop.runs.leases.Sleep`) with the other attempts' sleeps in one statement
    (``sleep_many.sql``); the test kit's writes go to its journal, the event the same."""

    def __init__(
        self,
        *,
        db: Database,
        attempt: Attempt,
        steps: Mapping[str, Any],
        use: Callable[[str], None],
        io_timeout_s: float | None,
        writer: Callable[[leases.FencedWrite], Awaitable[Any]],
    ) -> None:
        super().__init__(db=db, attempt=attempt, steps=steps, use=use, io_timeout_s=io_timeout_s)
        self._writer = writer

    async def sleep(
        self, delay: timedelta | None, until: datetime | None, name: str | None
    ) -> None:
        self._counts["sleep"] += 1
        step = SLEEP_STEP_PREFIX + (
            str(self._counts["sleep"]) if name is None else signals.check_name(name, "sleep name")
        )
        self._use(step)
        now = self._now()
        entry = self._entries.get(step)
        if entry is not None:
            journaled = due_of(entry)
            if ended(entry) is not None or journaled is None or journaled <= now:
                return  # woken, or (a replay) already past its journaled due time
            until, delay = journaled, None
        elif sleep_due(now, delay, until) <= now:
            return  # nothing to wait for
        attempt = self._attempt
        write = leases.Sleep(
            attempt.run_id,
            attempt.worker_id,
            attempt.number,
            trace_metadata(),
            step=step,
            delay=delay,
            until=until,
        )
        await self._start_sleep(write)
        raise Waiting(step)

    async def wait_for_event(
        self, name: str, time_out: timedelta | None, match: Any, step_name: str | None
    ) -> Any:
        signals.check_name(name, "event name")
        checked = signals.check_match(match)
        if time_out is not None and time_out.total_seconds() <= 0:
            raise InvalidInputError("a wait's timeout is a positive duration (or None)")
        self._counts[f"event:{name}"] += 1
        step = EVENT_STEP_PREFIX + (step_name or f"{name}:{self._counts[f'event:{name}']}")
        self._use(step)
        entry = self._entries.get(step)
        due_at: datetime | None = None
        if entry is not None:
            how = ended(entry)
            if how == SIGNAL:
                return entry.get("result")
            due_at = due_of(entry)
            if how == TIMEOUT or (due_at is not None and due_at <= self._now()):
                raise EventWaitTimeoutError(f"no signal {name!r} came before the wait's timeout")
        taken, payload = await self._take_or_wait(step, name, checked, time_out, due_at)
        if taken:
            self._attempt.finishing = False  # a kept signal answered: the attempt goes on
            metrics.SIGNALS_DELIVERED.labels("wait").inc()
            self._entries[step] = {"result": payload}
            return payload
        raise Waiting(step)

    # --- the I/O, which the test kit (awooop.testing) does in memory -------------------------

    async def _start_sleep(self, write: leases.Sleep) -> None:
        """Write the sleep's ``WaitStarted``, fenced; its lease is released with it."""
        attempt = self._attempt
        attempt.finishing = True
        try:
            await self._writer(write)
        except BaseException:
            attempt.finishing = False
            raise

    async def _take_or_wait(
        self,
        step: str,
        name: str,
        match: dict[str, Any] | None,
        time_out: timedelta | None,
        due_at: datetime | None,
    ) -> tuple[bool, Any]:
        """:func:`awooop.runs.signals.take_or_wait` for this attempt."""
        attempt = self._attempt
        taken: tuple[bool, Any] = await self._finish(
            lambda conn: signals.take_or_wait(
                conn,
                attempt.run_id,
                attempt.worker_id,
                attempt.number,
                step=step,
                name=name,
                match=match,
                time_out=time_out,
                due_at=due_at,
                metadata=trace_metadata(),
            )
        )
        return taken

    async def _finish(self, write: Callable[[Any], Any]) -> Any:
        """Run ``write`` in a tenant transaction of the run's project with the attempt marked
        finishing (its lease is released with the write)."""
        self._attempt.finishing = True
        try:
            with unavailable_on_store_errors("the wait could not be written"):
                return await self._db.in_tenant(
                    self._attempt.project_id, write, timeout_s=self._io_timeout_s
                )
        except BaseException:
            self._attempt.finishing = False
            raise
