"""The worker's heartbeat (R-12): the leases this process holds, kept alive.

The rule: **a worker that cannot renew stops its handlers before anyone else may take the
runs, whatever the network does.** Three parts hold it:

- Every attempt has a local lease deadline on this process's monotonic clock: the time the last
  renewal that Postgres confirmed was *sent* (or the claim, for the first) + the lease TTL - a
  safety margin (``AWOOOP_LEASE_SAFETY_FRACTION`` of the TTL). Postgres computed its own
  ``lease_until`` from its clock *after* that send, so the local deadline comes first. A timer
  on the event loop (:class:`awooop.worker.attempts.Deadlines`), not the return of any
  I/O call, cancels the handler when the deadline passes; its writes stop with it (each is also
  fenced by the database).
- Under a worker session (``AWOOOP_SESSION_LEASES``, the default; migration 0161) every
  ``heartbeat_interval_s`` one statement renews the session's row, and with it every lease of
  the process, however many. A run's own lease (``AWOOOP_RUN_LEASE_TTL_S``, longer) is renewed
  only when half of it is gone (:func:`renewal_due`), or to show a step that has run for an
  interval (:func:`shown_step`): a run a live worker forgot runs out with it. A local deadline
  is the earlier of the session's and the run's own. A session that ran out is lost with every
  lease it held; the worker begins a new one, which first gives up the runs the old one held.
- The runs' own renewals (every lease, every interval, with sessions off) go in statements of
  :data:`RENEWAL_CHUNK` leases, each bounded by ``AWOOOP_DB_STATEMENT_TIMEOUT_S`` (shorter than
  the local lease): a renewal that hangs on a black-holed connection fails in time and the next
  round tries again on a fresh one. A run missing from the answer lost its lease (reaped,
  taken, cancelled): its handler is cancelled at once. The same statement writes the step each
  attempt is in and since when, so the run page shows a long step while it runs without a
  write per step.
- Redis is never on the renewal's path. After a renewal the worker touches its own pending
  stream entries (``XCLAIM ... JUSTID`` to itself, R-16) so that reclaimers leave live work
  alone; that touch runs in its own task, bounded by the heartbeat interval, and a hung or
  failed touch delays no renewal.

The heartbeat is a plain task with a fixed period rather than a backoff loop: a lease must be
renewed on time even after a failed round.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta

from awooop.core import metrics
from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.core.storable import sanitized
from awooop.eventlog.runs import CurrentStep
from awooop.runs import leases
from awooop.runs.leases.sessions import Session
from awooop.worker.attempts import Attempt, StreamEntry
from awooop.worker.executor import Executor
from awooop.worker.outcomes import lease_lost

log = get_logger("awooop.worker")

Toucher = Callable[[list[StreamEntry]], Awaitable[None]]

# Leases renewed by one statement: a round renews more in several, each under the statement
# timeout on its own (the rows of one are locked for a short while, in run id order).
RENEWAL_CHUNK = 1000
# The longest step name a renewal writes (a step name has no bound of its own).
STEP_NAME_CHARS = 200


def shown_step(attempt: Attempt, now: datetime, interval_s: float) -> CurrentStep | None:
    """Pure: the step a renewal writes for ``attempt`` (``current_step``, migration 0127), once
    it has run for ``interval_s`` (under a worker session one heartbeat interval: a shorter
    step is never shown; 0 with sessions off): storable (NUL and lone surrogates escaped: one
    bad name must not fail the renewal of every lease) and cut to :data:`STEP_NAME_CHARS`."""
    step, started = attempt.step, attempt.step_started_at
    if step is None or started is None:
        return None
    if interval_s and now - started < timedelta(seconds=interval_s):
        return None
    return sanitized(step)[:STEP_NAME_CHARS], started


def renewal_due(
    attempt: Attempt, sent: float, now: datetime, run_lease_s: float, interval_s: float
) -> bool:
    """Pure: whether a round under a worker session renews the run's own lease of ``attempt``
    (``sent``: this round's monotonic time): half of that lease is gone, or the step it shows
    changed (:func:`shown_step`). Otherwise the session's renewal is the attempt's."""
    if sent - attempt.run_confirmed >= run_lease_s / 2:
        return True
    return shown_step(attempt, now, interval_s) != attempt.step_written


def current_steps(held: Mapping[uuid.UUID, Attempt]) -> dict[uuid.UUID, CurrentStep]:
    """Pure: the step each attempt is in now, as a renewal with sessions off writes it."""
    now = datetime.now(UTC)
    return {rid: step for rid, a in held.items() if (step := shown_step(a, now, 0.0)) is not None}


class Heartbeat:
    def __init__(
        self,
        executor: Executor,
        db: Database,
        *,
        ttl_s: float,
        interval_s: float,
        touch: Toucher | None = None,
    ) -> None:
        self.executor = executor
        self.statements = leases.RunStatements(db)
        self.ttl_s = ttl_s
        self.interval_s = interval_s
        self.touch = touch
        self.rounds = 0
        self._touching: asyncio.Task[None] | None = None
        # Leases held through a worker session (migration 0161): run_lease_s is each run's own.
        self.sessions = executor.settings.session_leases
        self.run_lease_s = executor.settings.run_lease_s if self.sessions else ttl_s
        self.session: Session | None = None
        self.previous: Session | None = None  # the last one, lost: a new one takes over from it

    async def open(self, stop: asyncio.Event) -> None:
        """Begin the worker's session before its first claim (nothing under sessions off);
        tried again every interval until it begins or ``stop`` is set."""
        while self.sessions and self.session is None and not stop.is_set():
            try:
                await self._start()
            except Exception as exc:
                log.warning("session_start_failed", error=repr(exc))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.interval_s)

    async def _start(self) -> None:
        sent = time.monotonic()
        worker_id = self.executor.worker_id
        self.session, given_up = await self.statements.start_session(
            worker_id, self.ttl_s, self.previous
        )
        self.executor.hold_session(sent)
        log.info("worker_session_started", worker_id=worker_id, given_up=given_up)

    async def _renew_session(self, held: dict[uuid.UUID, Attempt]) -> bool:
        """One statement renews every lease of the session; False when the session was lost:
        every attempt it held is stopped, and a new session begins."""
        if self.session is None:
            await self._start()
        else:
            sent = time.monotonic()
            if await self.statements.renew_session(self.session, self.ttl_s) is None:
                await self._lost(held)
                return False
            self.executor.hold_session(sent)
        metrics.LEASE_RENEWALS.inc(len(held))
        return True

    async def _lost(self, held: dict[uuid.UUID, Attempt]) -> None:
        log.warning("worker_session_lost", worker_id=self.executor.worker_id, held=len(held))
        self.previous, self.session = self.session, None
        self.executor.hold_session(None)
        for attempt in held.values():
            if not attempt.finishing:
                lease_lost(attempt, "the worker's session ran out before it was renewed")
        await self._start()

    async def beat(self) -> set[uuid.UUID]:
        """One round: renew in the database (bounded), move the local deadlines, touch entries;
        answers the runs whose leases it renewed. Under a session its one statement renews
        them all, and the runs whose own lease is due (:func:`renewal_due`) are renewed too.
        Those leases go in chunks of :data:`RENEWAL_CHUNK`, in run id order, each its own
        statement and each confirming its own leases: thousands of leases in one statement
        outlasted the statement timeout, and then none was renewed. A chunk that fails leaves
        the others renewed; the first failure is raised once every chunk was tried."""
        attempts = self.executor.attempts
        held = {rid: a for rid, a in sorted(attempts.items()) if a.stop_reason is None}
        covered: dict[uuid.UUID, Attempt] = {}  # renewed by the session's statement alone
        if self.sessions:
            if not await self._renew_session(held):
                return set()
            sent, now = time.monotonic(), datetime.now(UTC)
            for rid, a in held.items():
                if not renewal_due(a, sent, now, self.run_lease_s, self.interval_s):
                    covered[rid] = a
            held = {rid: a for rid, a in held.items() if rid not in covered}
        renewed = set(covered)
        entries = [a.entry for a in covered.values() if a.entry is not None]
        failure: Exception | None = None
        chunks = list(held.items())
        for start in range(0, len(chunks), RENEWAL_CHUNK):
            chunk = dict(chunks[start : start + RENEWAL_CHUNK])
            try:
                renewed |= await self._renew(chunk, entries)
            except Exception as exc:
                failure = failure or exc
        self.rounds += 1
        if entries and self.touch is not None:
            self._touch_in_background(entries)
        if failure is not None:
            raise failure
        return renewed

    async def _renew(
        self, held: dict[uuid.UUID, Attempt], entries: list[StreamEntry]
    ) -> set[uuid.UUID]:
        """One renewal statement for ``held``; its confirmed leases move their deadlines and
        their stream entries join ``entries`` (to touch)."""
        attempts = self.executor.attempts
        sent, now = time.monotonic(), datetime.now(UTC)
        shown_after = self.interval_s if self.sessions else 0.0
        shown = {rid: shown_step(a, now, shown_after) for rid, a in held.items()}
        steps = {rid: step for rid, step in shown.items() if step is not None}
        renewed = await self.statements.heartbeat(
            self.executor.worker_id,
            {rid: a.number for rid, a in held.items()},
            self.run_lease_s,
            steps,
        )
        if not self.sessions:
            metrics.LEASE_RENEWALS.inc(len(renewed))
        for rid, attempt in held.items():
            if rid in renewed:
                attempt.step_written = shown[rid]
                self.executor.hold(attempt, sent)
                if attempt.entry is not None:
                    entries.append(attempt.entry)
            elif attempts.get(rid) is attempt and not attempt.finishing:
                lease_lost(attempt, "the heartbeat did not renew it")
        return renewed

    def _touch_in_background(self, entries: list[StreamEntry]) -> None:
        if self._touching is not None and not self._touching.done():
            return  # the last touch still waits on Redis: the next renewal does not
        self._touching = asyncio.ensure_future(self._touch(entries))

    async def _touch(self, entries: list[StreamEntry]) -> None:
        assert self.touch is not None
        try:
            async with asyncio.timeout(self.interval_s):
                await self.touch(entries)
        except Exception as exc:
            log.warning("touch_failed", error=repr(exc), entries=len(entries))

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self.open(stop)
            while not stop.is_set():
                started = time.monotonic()
                try:
                    await self.beat()
                except Exception as exc:
                    log.warning("heartbeat_failed", error=repr(exc))
                delay = max(0.0, self.interval_s - (time.monotonic() - started))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
        finally:
            if self._touching is not None:
                self._touching.cancel()
                with contextlib.suppress(BaseException):
                    await self._touching
            await self._end()

    async def _end(self) -> None:
        """A stopping worker ends its session: a run it did not give back runs out now."""
        session, self.session = self.session, None
        if session is None:
            return
        try:
            async with asyncio.timeout(self.interval_s):
                await self.statements.end_session(session)
        except Exception as exc:  # its runs run out with their own leases instead
            log.warning("session_end_failed", error=repr(exc))
