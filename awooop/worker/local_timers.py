"""The sleeps this worker's attempts started, fired and claimed here when they are due
(docs/workers.md, Durable sleep).

An attempt that sleeps writes its ``WaitStarted`` and lets the run go (no slot, no lease:
:mod:`awooop.worker.durable_waits`). The worker then keeps in memory when the sleep is due, if
that is within ``AWOOOP_WORKER_TIMER_HORIZON_S`` and it holds fewer than
``AWOOOP_WORKER_TIMERS_MAX``: the journaled due time less the write's time (both by the
database clock), counted from when the write returned, so it never fires before the database
says the sleep is due. When sleeps are due and it has free slots, it fires as many as it has
slots for, all together in ONE statement that also claims them (``fire_claim.sql``:
``TimerFired`` on each run only if it still waits at the version this worker left it at, then
``RunClaimed`` where a claim may take it now; ``awooop_lease_claims_total{path="timer"}``),
without the relay and the stream in between. It has one such statement at a time, so the sleeps
that come due while one runs fire together in the next. Sleeps due beyond its free slots wait
here, earliest first.

Nothing depends on it: the ``timers`` loop fires every wait ``AWOOOP_TIMER_GRACE_S`` after
its due time (the sleeps of a worker that stopped, was killed or had no free slot that long,
or that were not due within the horizon), and whichever locks the run first fires it; the
other finds it no longer waiting at that version. The events stream carries both events (the
event log is the outbox); the work stream carries the ``TimerFired`` of a run this worker fired
but did not claim (a pause, a full concurrency key, the fair order or the routes held it back),
and its delivery claims it as any other. A delivery that reaches this worker while its
statement is under way waits for its answer (:meth:`LocalTimers.settled`) and is acknowledged
when the run was taken here, so a run is not claimed twice.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.logs import get_logger
from awooop.eventlog.state import RunState
from awooop.eventlog.wait_state import SLEEP, due_of
from awooop.loops.timers import fire_span
from awooop.runs import leases
from awooop.worker.tasks import first_of

if TYPE_CHECKING:
    from awooop.worker.runtime import Worker

log = get_logger("awooop.worker")

FIRE_BATCH = 500  # the most sleeps one statement fires
NO_ROOM_RECHECK_S = 0.005  # more sleeps due than free slots: look again this soon at most


@dataclass(order=True, frozen=True)
class Held:
    """A sleep this worker fires: due at ``due`` (time.monotonic()), the run at ``version``,
    the sleep ``step`` due at ``due_at`` (the database's clock, for the log)."""

    due: float
    run_id: uuid.UUID = field(compare=False)
    project_id: str = field(compare=False)
    version: int = field(compare=False)
    step: str = field(compare=False)
    due_at: datetime = field(compare=False)


def held_of(state: RunState, step: str, returned: float, horizon_s: float) -> Held | None:
    """Pure: the sleep ``step`` that ``state`` (the run just after its ``WaitStarted``, written
    by a statement that returned at ``returned``, monotonic) journals, to fire here; None when
    it is not due within ``horizon_s``."""
    entry = state.saga_steps.get(step)
    due = due_of(entry) if isinstance(entry, dict) else None
    if due is None:
        return None
    delay = (due - state.updated_at).total_seconds()
    if delay > horizon_s:
        return None
    return Held(
        returned + max(0.0, delay), state.run_id, state.project_id, state.version, step, due
    )


def take_due(heap: list[Held], now: float, limit: int) -> tuple[list[Held], float | None]:
    """Pure (it pops from ``heap``): the sleeps due at ``now``, earliest first, at most
    ``limit`` (the free slots); and how long to wait before looking again: a moment when more
    are due than that (a slot may free meanwhile), else until the next is due (None: none)."""
    due: list[Held] = []
    while heap and heap[0].due <= now and len(due) < limit:
        due.append(heapq.heappop(heap))
    if heap and heap[0].due <= now:
        return due, NO_ROOM_RECHECK_S
    return due, (heap[0].due - now if heap else None)


class LocalTimers:
    def __init__(self, worker: Worker, settings: Settings) -> None:
        self._worker = worker
        self._horizon_s = settings.worker_timer_horizon_s
        self._max = settings.worker_timers_max
        self._settings = settings
        self._statements = leases.RunStatements(worker.db)  # bounded: the worker's run pool
        self._heap: list[Held] = []
        self._changed = asyncio.Event()  # a sleep held sooner, a slot freed for a due one
        worker.on_freed.append(self._slot_freed)
        # The claims of the runs fired here, by (run, TimerFired's version), until the stream
        # delivers that event (or, bounded, the oldest are forgotten: Redis lost them).
        self._claims: dict[tuple[uuid.UUID, int], asyncio.Future[bool]] = {}

    @property
    def held(self) -> int:
        return len(self._heap)

    def hold(self, state: RunState, step: str) -> None:
        """A sleep's ``WaitStarted`` was just written (``state``: the run after it)."""
        if self._horizon_s <= 0 or len(self._heap) >= self._max:
            return
        held = held_of(state, step, time.monotonic(), self._horizon_s)
        if held is None:
            return
        heapq.heappush(self._heap, held)
        if self._heap[0] is held:
            self._changed.set()

    def settled(self, run_id: uuid.UUID, version: int) -> asyncio.Future[bool] | None:
        """The claim this worker makes of a run it fired, for the stream's delivery of that
        ``TimerFired`` (``version``): True once it took the lease here."""
        return self._claims.pop((run_id, version), None)

    async def run(self, stop: asyncio.Event) -> None:
        """Fire and claim the held sleeps as they come due and slots free, until ``stop``."""
        try:
            while not stop.is_set():
                self._changed.clear()
                due, wait_s = self._take_due(time.monotonic())
                if due:
                    # One statement at a time: the sleeps that come due while it runs, and the
                    # slots that free, go into the next.
                    await self._fire_claim(due)
                    continue
                await first_of(self._changed, stop, timeout_s=wait_s)
        finally:
            self._heap.clear()

    def _slot_freed(self) -> None:
        # Only when a due sleep waits for a slot: every attempt that ends calls this, and a
        # wake-up that finds nothing due costs the loop a turn for nothing.
        if self._heap and self._heap[0].due <= time.monotonic():
            self._changed.set()

    def _take_due(self, now: float) -> tuple[list[Held], float | None]:
        if self._worker.stopping():
            self._heap.clear()
            return [], None
        return take_due(self._heap, now, min(self._worker.free_slots(), FIRE_BATCH))

    async def _fire_claim(self, due: list[Held]) -> None:
        """Fire ``due`` and claim those a claim may take now, in one statement
        (:meth:`awooop.runs.leases.RunStatements.fire_claim`), and run the runs claimed. Each
        claim's future answers the stream's delivery of that run's ``TimerFired``: True when
        the run was taken here, else False, and the delivery claims it as any other (which
        rings what a pause, the fair order or the routes ask for). Until the statement ends
        their slots are spoken for (:attr:`Worker.claiming`)."""
        worker = self._worker
        loop = asyncio.get_running_loop()
        # Each claim is known before the statement is sent: the stream may deliver a fired
        # run's TimerFired (at the version after the sleep's) before its answer is read here.
        claims: dict[uuid.UUID, asyncio.Future[bool]] = {}
        for held in due:
            claims[held.run_id] = claimed = loop.create_future()
            self._remember((held.run_id, held.version + 1), claimed)
        worker.claiming += len(due)
        fired: set[uuid.UUID] = set()
        taken: set[uuid.UUID] = set()
        try:
            async with worker.isolation.admitted():  # waits while a suspect runs alone here
                if worker.stopping():
                    return
                sent = time.monotonic()
                with fire_span(len(due)) as trace_meta:
                    written = await self._statements.fire_claim(
                        [(h.run_id, h.version) for h in due],
                        worker.worker_id,
                        self._settings.claim_ttl_s,
                        trace_meta,
                        fair=self._settings.fair_share,
                        served=worker.routes.params,
                    )
                fired = {state.run_id for state, _claimed in written}
                self._log_fired(due, [state for state, _claimed in written])
                mine = [state for state, claimed in written if claimed]
                if worker.start(mine, sent, "timer"):
                    taken = {state.run_id for state in mine}
        except Exception as exc:  # the timers loop fires them after its grace
            log.warning("local_timers_fire_failed", runs=len(due), error=repr(exc))
        finally:
            worker.claiming -= len(due)
            for held in due:
                # Kept only for a run fired here and left to its delivery: a run not fired has
                # no TimerFired of this worker, and one claimed here most often no delivery
                # (the relay tells no worker of it: awooop.streams.publish.routes_of).
                if held.run_id not in fired or held.run_id in taken:
                    self._claims.pop((held.run_id, held.version + 1), None)
                claimed = claims[held.run_id]
                if not claimed.done():
                    claimed.set_result(held.run_id in taken)

    def _log_fired(self, due: list[Held], fired: list[RunState]) -> None:
        if fired:
            metrics.WORKER_TIMERS_FIRED.inc(len(fired))
        sleeps = {h.run_id: h for h in due}
        for state in fired:
            held = sleeps[state.run_id]
            log.info(
                "timer_fired",
                run_id=str(state.run_id),
                project_id=state.project_id,
                step=held.step,
                kind=SLEEP,
                late_s=round((state.updated_at - held.due_at).total_seconds(), 3),
                by=self._worker.worker_id,
            )

    def _remember(self, key: tuple[uuid.UUID, int], claimed: asyncio.Future[bool]) -> None:
        while len(self._claims) >= self._max:
            self._claims.pop(next(iter(self._claims)))
        self._claims[key] = claimed
