"""The ``timers`` loop (platform): ends the waits of sleeping and waiting runs when they are due,
and delivers the signals the producer library left pending (docs/workers.md, Durable sleep).

A wait is the loop's ``AWOOOP_TIMER_GRACE_S`` after its due time: until then the worker whose
attempt started a sleep fires it itself (:mod:`awooop.worker.local_timers`); the loop fires
what no worker did (the worker stopped, was killed or had no free slot, a sleep beyond its
horizon), and event waits' timeouts. Every due time below is counted with that grace.

Each iteration fires due waits in batches of ``AWOOOP_TIMER_BATCH_SIZE`` (one transaction each,
``FOR UPDATE SKIP LOCKED``: any number of copies fire each wait once; :mod:`awooop.runs.timers`),
each batch round-robin across the projects with due waits (every such project's earliest due
wait before any project's second, then the earliest due of any project to fill it), up to
``MAX_BATCHES`` per iteration (then the next iteration starts at once), so one project's
thousands of timers due at one instant hold another project's timer back for at most one
batch, and never hold the loop. The last batch's transaction also asks the database when the
next wait is due. Then it delivers pending signals the same way
(:func:`awooop.runs.signals.deliver_pending`) and cancels the child runs a cancelled parent left
(:func:`awooop.eventlog.child_waits.cancel_left`), each when its notification (below) rang
since its last pass or its last pass left work (more than a batch; a parent whose children
were locked elsewhere), and both in the first iteration after it (re)opened its listening
connection, in any iteration ``AWOOOP_TIMER_POLL_INTERVAL_S`` or more after the last that
made both and in every iteration while the loop cannot listen: an iteration woken by a due
timer is one transaction.

It wakes (``ctx.wakeup``) at that time (no sooner than ``AWOOOP_TIMER_COALESCE_S`` after the
last iteration began: while timers keep coming due, those due meanwhile fire together, each at
most that much late, in one transaction, one relay read and one worker read instead of one
each, and while their workers fire them the loop looks once per that time, not once per
wait; a timer due after a quiet spell fires at once), when a
notification on ``awooop_timers`` says a new wait is due sooner than that (the trigger of
migration 0141 sends, with each new wait, in how many seconds it is due), that a signal is
pending or that a cancelled parent left children to cancel (migration 0145), and otherwise
every ``AWOOOP_TIMER_POLL_INTERVAL_S`` (the fallback for a lost notification or listener). A
notification is a doorbell, never an order: a false ring costs one query.

Each batch that resumes runs (``TimerFired``, a pending signal's ``SignalDelivered``) is written
in a span of its own trace (:func:`resume_span`: ``timers fire``, ``signals deliver``), linked
to the loop iteration's span; its events carry it (``traceparent``), so the relay publishes
them in that trace and each resumed attempt's ``run`` span links to it
(:mod:`awooop.worker.tracelinks`, link ``resumed_by``). Such a span is sampled as the
configured sampler decides, not at the loop iterations' ratio: like an ingest it starts work
people follow, and an iteration that resumes nothing opens none.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry.context import Context

from awooop.core import metrics
from awooop.core.db import Connection, Database
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.core.telemetry import context_metadata, inject, span_link, tracer
from awooop.eventlog import child_waits
from awooop.eventlog.runs import apply_and_store_many
from awooop.runs import signals, timers
from awooop.services import Services

log = get_logger(__name__)

CHANNEL = "awooop_timers"
SIGNAL_PAYLOAD = "signal"
CHILDREN_PAYLOAD = "children"
MAX_BATCHES = 20
MIN_DELAY_S = 0.005  # a wake sooner than this runs the next iteration at once
LISTEN_TIMEOUT_S = 10.0  # to connect, then to LISTEN: a black-holed server fails the round


@contextlib.contextmanager
def resume_span(name: str, runs: int) -> Iterator[dict[str, Any]]:
    """A root span around writes that resume ``runs`` runs, linked to the current span (the
    loop iteration's, when sampled); yields the metadata naming it (module doc)."""
    with tracer.start_as_current_span(
        name, context=Context(), links=span_link(*inject()), attributes={"awooop.runs": runs}
    ):
        yield context_metadata()


def fire_span(runs: int) -> contextlib.AbstractContextManager[dict[str, Any]]:
    return resume_span("timers fire", runs)


def deliver_span(runs: int) -> contextlib.AbstractContextManager[dict[str, Any]]:
    return resume_span("signals deliver", runs)


async def fire_once(db: Database, batch: int, grace_s: float = 0.0) -> tuple[int, bool]:
    """Fire the waits due ``grace_s`` ago in batches; returns (fired, more: the bound was
    reached)."""
    total, more, _next = await fire_and_look_ahead(db, batch, grace_s)
    return total, more


async def fire_and_look_ahead(
    db: Database, batch: int, grace_s: float = 0.0
) -> tuple[int, bool, float | None]:
    """:func:`fire_once`, and when the batches ended below the bound, the seconds until the next
    wait is due (:func:`awooop.runs.timers.next_due_in`), read in the last batch's transaction:
    no transaction of its own. Returns (fired, more, next due in)."""

    async def fire_batch(conn: Connection) -> tuple[list[Any], float | None]:
        fired = await timers.fire_due(conn, batch, grace_s=grace_s, traced=fire_span)
        return fired, (await timers.next_due_in(conn, grace_s) if len(fired) < batch else None)

    total = 0
    for _ in range(MAX_BATCHES):
        fired, next_due = await db.in_platform_writes(fire_batch)
        for state, event in fired:
            log.info(
                "timer_fired",
                run_id=str(state.run_id),
                project_id=state.project_id,
                step=event.step,
                kind=event.kind,
                late_s=round((event.at - event.due_at).total_seconds(), 3),
            )
        total += len(fired)
        if len(fired) < batch:
            return total, False, next_due
    return total, True, None


async def deliver_once(db: Database, batch: int) -> tuple[int, bool]:
    """Deliver pending signals in batches; returns (delivered, more)."""
    total = 0
    for _ in range(MAX_BATCHES):
        looked, delivered = await db.in_platform_writes(
            lambda conn: signals.deliver_pending(conn, batch, traced=deliver_span)
        )
        total += delivered
        if looked < batch:
            return total, False
    return total, True


async def cancel_children_once(db: Database, batch: int) -> tuple[int, bool]:
    """Cancel the children cancelled parents left, in batches; returns (cancelled, more)."""
    total, more, _looked = await cancel_children_pass(db, batch)
    return total, more


async def cancel_children_pass(db: Database, batch: int) -> tuple[int, bool, bool]:
    """:func:`cancel_children_once`, and whether it looked at any parent (one whose children
    were locked elsewhere is kept for the next pass). Returns (cancelled, more, looked)."""
    total, seen = 0, False
    for _ in range(MAX_BATCHES):
        looked, cancelled = await db.in_platform_writes(
            lambda conn: child_waits.cancel_left(conn, batch, apply_and_store_many)
        )
        total += cancelled
        seen = seen or looked > 0
        if looked < batch:
            return total, False, seen
    return total, True, seen


class TimerWakeup:
    """When the next iteration should start (the next due wait, sooner if told), and which of
    the signal and child passes it makes (:meth:`begin`)."""

    def __init__(
        self, ctx: LoopContext, database_url: str, full_pass_s: float, grace_s: float = 0.0
    ) -> None:
        self._ctx = ctx
        self._grace_s = grace_s  # a wait is the loop's this long after its due time
        self._url = database_url
        self._conn: Connection | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._wake_at: float | None = None  # time.monotonic() of the armed wake
        # The soonest new wait notified since the iteration began (time.monotonic()): the
        # iteration's own look ahead may have read the waits before it was written.
        self._noted: float | None = None
        self._full_pass_s = full_pass_s
        self._last_full: float | None = None  # time.monotonic() of the last full iteration
        self._signals = self._children = True  # rung: pending signals, children to cancel

    def begin(self) -> tuple[bool, bool]:
        """An iteration starts: whether it delivers pending signals and cancels children left.
        Each when rung for it since the last pass; both in the first iteration after the
        listening connection opened, in one at least ``full_pass_s`` after the last that made
        both (the fallback for a lost notification) and in every one while nobody listens."""
        now = time.monotonic()
        last = self._last_full
        full = self._conn is None or last is None or now - last >= self._full_pass_s
        if full:
            self._last_full = now
        passes = (self._signals or full, self._children or full)
        self._signals = self._children = False
        self._noted = None
        return passes

    def again(self, signals: bool, children: bool) -> None:
        """The next iteration makes these passes too (this one failed, or left more)."""
        self._signals = self._signals or signals
        self._children = self._children or children

    def armed_in(self) -> float | None:
        """Seconds until the armed wake (None: none armed)."""
        return None if self._wake_at is None else self._wake_at - time.monotonic()

    def settle(self, due_in: float | None) -> None:
        """Arm the wake after an iteration: at ``due_in`` (its look ahead), or sooner when a
        wait notified during the iteration is due sooner."""
        if self._noted is not None:
            noted = max(0.0, self._noted - time.monotonic())
            due_in = noted if due_in is None else min(due_in, noted)
        self.arm(due_in)

    async def listen(self) -> None:
        """(Re)open the listening connection if it is gone; errors are the caller's."""
        if self._conn is not None and not self._conn.is_closed():
            return
        self._conn = await connect(self._url, PLATFORM_ROLE, LISTEN_TIMEOUT_S)
        await asyncio.wait_for(self._conn.add_listener(CHANNEL, self._notified), LISTEN_TIMEOUT_S)
        self._last_full = None  # what was rung before it listened: the next pass is full

    def arm(self, delay_s: float | None) -> None:
        """Wake in ``delay_s`` (None: only at the poll fallback or a notification)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake_at = None
        if delay_s is None:
            return
        if delay_s <= MIN_DELAY_S:
            self._ctx.wakeup.set()
            return
        self._wake_at = time.monotonic() + delay_s
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._ctx.wakeup.set)

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if payload in (SIGNAL_PAYLOAD, CHILDREN_PAYLOAD):
            if payload == SIGNAL_PAYLOAD:
                self._signals = True
            else:
                self._children = True
            self._ctx.wakeup.set()
            return
        try:
            due_in = float(str(payload)) + self._grace_s
        except ValueError:
            return
        due_at = time.monotonic() + due_in
        if self._noted is None or due_at < self._noted:
            self._noted = due_at
        if self._wake_at is None or due_at < self._wake_at:
            self.arm(max(0.0, due_in))

    async def close(self) -> None:
        self.arm(None)
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=5)
            self._conn = None


def loops(services: Services) -> list[LoopSpec]:
    settings = services.settings
    wakeups: dict[int, TimerWakeup] = {}

    async def body(ctx: LoopContext) -> None:
        wake = wakeups.get(id(ctx))
        if wake is None:
            wake = wakeups[id(ctx)] = TimerWakeup(
                ctx, settings.database_url, settings.timer_poll_interval_s, settings.timer_grace_s
            )
        try:
            await wake.listen()  # first: a wait written from now on rings
        except Exception as exc:  # the poll fallback goes on without it
            log.warning("timers_listen_failed", error=repr(exc))
            await wake.close()
        batch = settings.timer_batch_size
        started = time.monotonic()
        signals_due, children_due = wake.begin()
        try:
            fired, more_timers, due_in = await fire_and_look_ahead(
                services.db, batch, settings.timer_grace_s
            )
            delivered, more_signals = (
                await deliver_once(services.db, batch) if signals_due else (0, False)
            )
            cancelled, more_cancels, looked = (
                await cancel_children_pass(services.db, batch)
                if children_due
                else (0, False, False)
            )
        except BaseException:
            wake.again(signals_due, children_due)
            raise
        # A pass that looked at a parent comes again in the next iteration (as it found
        # children locked elsewhere, it keeps the parent), until one finds none.
        wake.again(more_signals, more_cancels or looked)
        if cancelled:
            log.info("child_runs_cancelled", runs=cancelled)
        if fired:
            metrics.TIMERS_FIRED.inc(fired)
        if delivered:
            metrics.SIGNALS_DELIVERED.labels("loop").inc(delivered)
        if more_timers or more_signals or more_cancels:
            due_in = 0.0
        elif due_in is not None:  # waits keep coming due: coalesce (module doc)
            due_in = max(due_in, settings.timer_coalesce_s - (time.monotonic() - started))
        wake.settle(due_in)

    async def close() -> None:
        for wake in wakeups.values():
            await wake.close()
        wakeups.clear()

    return [
        LoopSpec(
            name="timers",
            category=LoopCategory.PLATFORM,
            interval_s=settings.timer_poll_interval_s,
            body=body,
            description="resume sleeping runs and event waits that timed out; deliver "
            "pending signals; cancel the children cancelled parents left",
            close=close,
        )
    ]
