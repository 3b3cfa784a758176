"""The worker's heartbeat (R-12) and its cancel listener.

The rule: **a worker that cannot renew stops its handlers before anyone else may take the
runs, whatever the network does.** Three parts hold it:

- Every attempt has a local lease deadline on this process's monotonic clock: the time the last
  renewal that Postgres confirmed was *sent* (or the claim, for the first) + the lease TTL - a
  safety margin (``AWOOOP_LEASE_SAFETY_FRACTION`` of the TTL). Postgres computed its own
  ``lease_until`` from its clock *after* that send, so the local deadline comes first. A timer
  on the event loop (:class:`awooop.worker.attempts.Deadlines`), not the return of any
  I/O call, cancels the handler when the deadline passes; its writes stop with it (each is also
  fenced by the database).
- Every ``heartbeat_interval_s`` one statement per :data:`RENEWAL_CHUNK` leases renews the
  leases this process holds, each bounded by ``AWOOOP_DB_STATEMENT_TIMEOUT_S`` (shorter than
  the local lease): a renewal that hangs on a black-holed connection fails in time and the
  next round tries again on a fresh one. A
  run missing from the answer lost its lease (reaped, taken, cancelled): its handler is
  cancelled at once. The same statement writes the step each attempt is in and since when
  (:func:`current_steps`), so the run page shows a long step while it runs without a write per
  step; it is at most one interval old.
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

from awooop.core import metrics
from awooop.core.db import Database
from awooop.core.listening import Notified, listen
from awooop.core.logs import get_logger
from awooop.core.storable import sanitized
from awooop.eventlog.runs import CurrentStep
from awooop.runs import leases
from awooop.runs.control import CANCEL_CHANNEL
from awooop.runs.pauses import RESUME_CHANNEL
from awooop.runs.routing import ROUTE_CHANNEL, Routes, notice_served
from awooop.worker.attempts import Attempt, StopReason, StreamEntry
from awooop.worker.executor import Executor
from awooop.worker.outcomes import lease_lost

log = get_logger("awooop.worker")

Toucher = Callable[[list[StreamEntry]], Awaitable[None]]

# The least time between two checks of cancel notices: a flood of notices naming runs this
# process holds costs at most one read per gap, and a real cancel still stops its handler
# within a gap and a read.
CHECK_GAP_S = 0.1
# Leases renewed by one statement: a round renews more in several, each under the statement
# timeout on its own (the rows of one are locked for a short while, in run id order).
RENEWAL_CHUNK = 1000
# The longest step name a renewal writes (a step name has no bound of its own).
STEP_NAME_CHARS = 200


def current_steps(held: Mapping[uuid.UUID, Attempt]) -> dict[uuid.UUID, CurrentStep]:
    """Pure: the step each attempt is in now, as the renewal writes it (``current_step``,
    migration 0127): storable (NUL and lone surrogates escaped: one bad name must not fail the
    renewal of every lease) and cut to :data:`STEP_NAME_CHARS`."""
    return {
        rid: (sanitized(a.step)[:STEP_NAME_CHARS], a.step_started_at)
        for rid, a in held.items()
        if a.step is not None and a.step_started_at is not None
    }


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

    async def beat(self) -> set[uuid.UUID]:
        """One round: renew in the database (bounded), move the local deadlines, touch entries.
        The leases go in chunks of :data:`RENEWAL_CHUNK`, in run id order, each its own
        statement and each confirming its own leases: thousands of leases in one statement
        outlasted the statement timeout, and then none was renewed. A chunk that fails leaves
        the others renewed; the first failure is raised once every chunk was tried."""
        attempts = self.executor.attempts
        held = {rid: a for rid, a in sorted(attempts.items()) if a.stop_reason is None}
        if not held:
            return set()
        renewed: set[uuid.UUID] = set()
        entries: list[StreamEntry] = []
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
        sent = time.monotonic()
        renewed = await self.statements.heartbeat(
            self.executor.worker_id,
            {rid: a.number for rid, a in held.items()},
            self.ttl_s,
            current_steps(held),
        )
        metrics.LEASE_RENEWALS.inc(len(renewed))
        for rid, attempt in held.items():
            if rid in renewed:
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


class CancelListener:
    """LISTEN on the cancel channel: a cancelled run's handler is cancelled at once.

    A notice is a doorbell, never an order: any database login can ``pg_notify`` any channel
    (Postgres has no privilege for it), so a notice only makes the worker read, from Postgres,
    who holds the runs it names. An attempt stops only when its row says the run was cancelled
    (``StopReason.CANCELLED``) or that the attempt no longer holds it (lease lost); otherwise the
    notice is ignored and counted (``awooop_cancel_notices_total{verdict}``). Notices for runs
    this process does not hold cost nothing; notices that arrive while a check runs join the
    next one, and checks are at least :data:`CHECK_GAP_S` apart, so a flood of notices costs at
    most one primary-key read per gap.

    The same connection listens for resumed pauses (:data:`awooop.runs.pauses.RESUME_CHANNEL`),
    another doorbell: ``on_resume`` makes the polling path look at once (resume_bell.py); and
    for routing notices (awooop.runs.routing): ``on_route`` owes the polling path one start for
    each run of this worker's ``routes`` that another worker's delivery could not take.

    Reconnects with a pause when the connection drops; meanwhile the heartbeat still finds
    cancelled runs (their leases are no longer renewed)."""

    def __init__(
        self,
        executor: Executor,
        database_url: str,
        db: Database,
        on_resume: Callable[[], None] | None = None,
        routes: Routes | None = None,
        on_route: Callable[[], None] | None = None,
    ) -> None:
        self.executor = executor
        self.on_resume = on_resume
        self.routes = routes
        self.on_route = on_route
        self.database_url = database_url
        self.statements = leases.RunStatements(db)
        self.connected = asyncio.Event()
        self._asked: set[uuid.UUID] = set()
        self._ring = asyncio.Event()

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        try:
            run_id = uuid.UUID(str(payload))
        except ValueError:
            metrics.CANCEL_NOTICES.labels(verdict="malformed").inc()
            return
        attempt = self.executor.attempts.get(run_id)
        if attempt is None or attempt.stop_reason is not None or attempt.finishing:
            return  # not ours (or already stopping): nothing to check
        self._asked.add(run_id)
        self._ring.set()

    def _resumed(self, _conn: object, _pid: int, _channel: str, _payload: object) -> None:
        """A pause was resumed (awooop.runs.pauses): the polling path looks at once."""
        if self.on_resume is not None:
            self.on_resume()

    def _routed(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """Another worker acknowledged the message of a run that this one serves (its routes,
        awooop.runs.routing): the polling path owes it a start, at any age, now."""
        routes, owe = self.routes, self.on_route
        if owe is not None and routes is not None and notice_served(routes, str(payload)):
            owe()

    async def check(self) -> None:
        """Read who holds the runs the notices named, and stop the attempts the rows condemn."""
        asked, self._asked = self._asked, set()
        attempts = {
            rid: a
            for rid in asked
            if (a := self.executor.attempts.get(rid)) is not None
            and a.stop_reason is None
            and not a.finishing
        }
        if not attempts:
            return
        found, now = await self.statements.fences(list(attempts))
        for rid, attempt in attempts.items():
            verdict, why = leases.notice_verdict(
                found.get(rid), now, attempt.worker_id, attempt.number
            )
            metrics.CANCEL_NOTICES.labels(verdict=verdict.value).inc()
            if verdict is leases.Verdict.CANCELLED:
                if attempt.stop(StopReason.CANCELLED):
                    log.info("run_cancelled_by_operator", run_id=str(rid))
            elif verdict is leases.Verdict.LOST:
                lease_lost(attempt, why)
            else:
                log.info("cancel_notice_ignored", run_id=str(rid), why=why)

    async def _checking(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            ring = asyncio.ensure_future(self._ring.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({ring, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ring.cancel()
                stopper.cancel()
            if stop.is_set():
                return
            self._ring.clear()
            try:
                await self.check()
            except Exception as exc:  # the heartbeat finds a cancelled run at its next round
                log.warning("cancel_check_failed", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=CHECK_GAP_S)

    async def run(self, stop: asyncio.Event) -> None:
        checking = asyncio.ensure_future(self._checking(stop))
        try:
            await self._listen(stop)
        finally:
            checking.cancel()
            with contextlib.suppress(BaseException):
                await checking

    async def _listen(self, stop: asyncio.Event) -> None:
        channels: dict[str, Notified] = {CANCEL_CHANNEL: self._notified}
        if self.on_resume is not None:
            channels[RESUME_CHANNEL] = self._resumed
        if self.on_route is not None:
            channels[ROUTE_CHANNEL] = self._routed
        await listen(self.database_url, channels, stop, self.connected, name="cancel_listener")
