"""The ``timers`` loop (platform): ends the waits of sleeping and waiting runs when they are due,
and delivers the signals the producer library left pending (docs/workers.md, Durable sleep).

Each iteration fires due waits in batches of ``AWOOOP_TIMER_BATCH_SIZE`` (one transaction each,
``FOR UPDATE SKIP LOCKED``: any number of copies fire each wait once; :mod:`awooop.runs.timers`),
each batch round-robin across the projects with due waits (every such project's earliest due
wait before any project's second, then the earliest due of any project to fill it), up to
``MAX_BATCHES`` per iteration (then the next iteration starts at once), so one project's
thousands of timers due at one instant hold another project's timer back for at most one
batch, and never hold the loop. Then it delivers pending signals the same way
(:func:`awooop.runs.signals.deliver_pending`), cancels the child runs a cancelled parent left
(:func:`awooop.eventlog.child_waits.cancel_left`) and asks the database when the next wait is
due.

It wakes (``ctx.wakeup``) at that time, when a notification on ``awooop_timers`` says a new wait
is due sooner than that (the trigger of migration 0141 sends, with each new wait, in how many
seconds it is due), that a signal is pending or that a cancelled parent left children to
cancel (migration 0145), and otherwise every
``AWOOOP_TIMER_POLL_INTERVAL_S`` (the fallback for a lost notification or listener). A
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


async def fire_once(db: Database, batch: int) -> tuple[int, bool]:
    """Fire due waits in batches; returns (fired, more: the bound was reached)."""
    total = 0
    for _ in range(MAX_BATCHES):
        fired = await db.in_platform_writes(
            lambda conn: timers.fire_due(conn, batch, traced=fire_span)
        )
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
            return total, False
    return total, True


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
    total = 0
    for _ in range(MAX_BATCHES):
        looked, cancelled = await db.in_platform_writes(
            lambda conn: child_waits.cancel_left(conn, batch, apply_and_store_many)
        )
        total += cancelled
        if looked < batch:
            return total, False
    return total, True


class TimerWakeup:
    """When the next iteration should start: the next due wait, sooner if told."""

    def __init__(self, ctx: LoopContext, database_url: str) -> None:
        self._ctx = ctx
        self._url = database_url
        self._conn: Connection | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._wake_at: float | None = None  # time.monotonic() of the armed wake

    async def listen(self) -> None:
        """(Re)open the listening connection if it is gone; errors are the caller's."""
        if self._conn is not None and not self._conn.is_closed():
            return
        self._conn = await connect(self._url, PLATFORM_ROLE)
        await self._conn.add_listener(CHANNEL, self._notified)

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
            self._ctx.wakeup.set()
            return
        try:
            due_in = float(str(payload))
        except ValueError:
            return
        if self._wake_at is None or time.monotonic() + due_in < self._wake_at:
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
            wake = wakeups[id(ctx)] = TimerWakeup(ctx, settings.database_url)
        try:
            await wake.listen()  # first: a wait written from now on rings
        except Exception as exc:  # the poll fallback goes on without it
            log.warning("timers_listen_failed", error=repr(exc))
            await wake.close()
        fired, more_timers = await fire_once(services.db, settings.timer_batch_size)
        delivered, more_signals = await deliver_once(services.db, settings.timer_batch_size)
        cancelled, more_cancels = await cancel_children_once(services.db, settings.timer_batch_size)
        if cancelled:
            log.info("child_runs_cancelled", runs=cancelled)
        if fired:
            metrics.TIMERS_FIRED.inc(fired)
        if delivered:
            metrics.SIGNALS_DELIVERED.labels("loop").inc(delivered)
        if more_timers or more_signals or more_cancels:
            wake.arm(0.0)
            return
        async with services.db.platform() as conn:
            wake.arm(await timers.next_due_in(conn))

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
