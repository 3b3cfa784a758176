"""Durable sleep and signals in a :class:`~awooop.testing.HandlerKit` run, in memory: what
``awooop_run_waits``, ``awooop_signals``, :mod:`awooop.runs.signals` and the ``timers`` loop
keep and decide on Postgres, giving the events those write.

The handler's ``run.sleep`` / ``run.sleep_until`` / ``run.wait_for_event`` are the runtime's own
(:class:`~awooop.worker.durable_waits.DurableWaits`: the step names, the journaled due time,
the replay of a wait that ended, the timeout raised as E-SIGNAL-001); only their I/O is here
(:class:`MemoryDurableWaits`): the kit's clock, and the fenced writes into the kit's journal.
The run's open wait is the last ``WaitStarted`` of its journal while it is WAITING_EVENT:

- :func:`timer_due`: the ``TimerFired`` the timers loop writes once the kit's clock reaches
  the wait's due time (a sleep's, an event wait's timeout);
- :class:`Signals`: the signals sent to the run (:meth:`HandlerKit.signal
  <awooop.testing.HandlerKit.signal>`), refused, kept, repeated by key and delivered as
  :func:`awooop.runs.signals.send` does: a signal sent before the wait is kept and taken when
  the wait starts (an ordinary step), one sent during it is delivered (``SignalDelivered``),
  the same key twice is one signal, the oldest kept signal whose payload contains the wait's
  ``match`` (``jsonb @>``, :func:`awooop.eventlog.wait_state.contains`) is taken first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from awooop.core.errors import SignalLimitError, SignalRunFinishedError
from awooop.core.events import SignalDelivered, StepCompleted, TimerFired, WaitStarted
from awooop.eventlog.state import TERMINAL, RunState, RunStatus
from awooop.eventlog.wait_state import EVENT, contains
from awooop.runs import leases, signals
from awooop.runs.signals import Sent
from awooop.testing.fakes import Clock
from awooop.testing.journal import Journal
from awooop.worker.attempts import Attempt
from awooop.worker.durable_waits import DurableWaits


@dataclass
class KeptSignal:
    """A signal sent to the run: a row of ``awooop_signals``."""

    signal_id: uuid.UUID
    name: str
    key: str
    payload: Any
    sent_by: str
    sent_at: datetime
    delivered_at: datetime | None = None
    step: str | None = None  # the wait it answered


@dataclass
class Signals:
    """The run's signals (module doc), oldest first."""

    sent: list[KeptSignal] = field(default_factory=list)

    def oldest(self, name: str, match: Any) -> KeptSignal | None:
        """The oldest undelivered signal of ``name`` whose payload contains ``match``."""
        for signal in self.sent:
            kept = signal.delivered_at is None and signal.name == name
            if kept and (match is None or contains(signal.payload, match)):
                return signal
        return None

    def send(
        self,
        journal: Journal,
        name: str,
        payload: Any,
        key: str,
        sent_by: str,
        now: datetime,
        *,
        payload_max_bytes: int,
        kept_max: int,
    ) -> tuple[Sent, SignalDelivered | None]:
        """Keep a signal to the run of ``journal`` and deliver it if the run's open wait
        takes it; refused (nothing kept) as :func:`awooop.runs.signals.send` refuses it."""
        signals.check_name(name)
        signals.check_key(key)
        payload = signals.check_payload(payload, payload_max_bytes)
        state = journal.state
        run_id = state.run_id
        for found in self.sent:
            if found.key == key:  # the same key: the first one's answer, nothing new
                delivered = found.delivered_at is not None
                return Sent(
                    signal_id=found.signal_id,
                    run_id=run_id,
                    name=found.name,
                    key=key,
                    delivered=delivered,
                    duplicate=True,
                ), None
        if state.status in TERMINAL:
            raise SignalRunFinishedError(run_id=run_id, status=state.status)
        if sum(1 for s in self.sent if s.delivered_at is None) >= kept_max:
            raise SignalLimitError(run_id=run_id, kept=kept_max)
        signal = KeptSignal(uuid.uuid4(), name, key, payload, sent_by, now)
        self.sent.append(signal)
        event = self.deliver(open_wait(journal), now)
        delivered = event is not None and event.signal_id == signal.signal_id
        return Sent(
            signal_id=signal.signal_id, run_id=run_id, name=name, key=key, delivered=delivered
        ), event

    def deliver(self, wait: WaitStarted | None, now: datetime) -> SignalDelivered | None:
        """The delivery of the oldest kept signal that answers the open event ``wait``."""
        if wait is None or wait.kind != EVENT or wait.name is None:
            return None
        signal = self.oldest(wait.name, wait.match)
        if signal is None:
            return None
        signal.delivered_at, signal.step = now, wait.step
        return SignalDelivered(
            at=now,
            step=wait.step,
            name=wait.name,
            signal_id=signal.signal_id,
            key=signal.key,
            payload=signal.payload,
            sent_by=signal.sent_by,
        )


def open_wait(journal: Journal) -> WaitStarted | None:
    """The run's open wait: its last ``WaitStarted`` while it is WAITING_EVENT."""
    if journal.state.status is not RunStatus.WAITING_EVENT:
        return None
    return next((e for e in reversed(journal) if isinstance(e, WaitStarted)), None)


def timer_due(wait: WaitStarted | None, now: datetime) -> TimerFired | None:
    """What the timers loop writes at ``now`` for the open ``wait``: ``TimerFired`` once its
    due time came, else None."""
    if wait is None or wait.due_at is None or wait.due_at > now:
        return None
    return TimerFired(at=now, step=wait.step, kind=wait.kind, due_at=wait.due_at)


class WaitsDriver(Protocol):
    """What the waits need of their :class:`~awooop.testing.HandlerKit`."""

    clock: Clock

    @property
    def state(self) -> RunState: ...
    @property
    def signals(self) -> Signals: ...
    async def write(self, write: leases.FencedWrite) -> RunState: ...


class MemoryDurableWaits(DurableWaits):
    """The runtime's durable waits, their I/O on the kit (module doc)."""

    def __init__(
        self,
        kit: WaitsDriver,
        attempt: Attempt,
        steps: Mapping[str, Any],
        use: Callable[[str], None],
    ) -> None:
        db: Any = None  # never used: every write below goes to the kit
        super().__init__(
            db=db, attempt=attempt, steps=steps, use=use, io_timeout_s=None, writer=kit.write
        )
        self._kit = kit

    def _now(self) -> datetime:
        return self._kit.clock.now()

    async def _take_or_wait(
        self,
        step: str,
        name: str,
        match: dict[str, Any] | None,
        time_out: timedelta | None,
        due_at: datetime | None,
    ) -> tuple[bool, Any]:
        """What :func:`awooop.runs.signals.take_or_wait` does under the run's lock."""
        kit, a = self._kit, self._attempt
        running = kit.state.status is RunStatus.RUNNING
        signal = kit.signals.oldest(name, match) if running else None
        if signal is not None:
            taken = signal

            def step_done(_state: Any, at: datetime) -> StepCompleted:
                return StepCompleted(
                    at=at, worker_id=a.worker_id, attempt=a.number, step=step, result=taken.payload
                )

            await self._finishing(leases.FencedWrite(a.run_id, a.worker_id, a.number, step_done))
            signal.delivered_at, signal.step = kit.clock.now(), step
            return True, signal.payload

        def started(_state: Any, at: datetime) -> WaitStarted:
            return WaitStarted(
                at=at,
                worker_id=a.worker_id,
                attempt=a.number,
                step=step,
                kind=EVENT,
                name=name,
                match=match,
                due_at=due_at or (None if time_out is None else at + time_out),
            )

        await self._finishing(leases.FencedWrite(a.run_id, a.worker_id, a.number, started))
        return False, None

    async def _finishing(self, write: leases.FencedWrite) -> None:
        """A write of the attempt marked finishing (it may end the attempt), as ``_finish``."""
        self._attempt.finishing = True
        try:
            await self._kit.write(write)
        except BaseException:
            self._attempt.finishing = False
            raise
