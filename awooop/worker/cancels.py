"""The worker's cancel listener: a doorbell for cancels, resumed pauses and routed runs.

It listens on a connection of its own; the heartbeat (:mod:`awooop.worker.heartbeat`) keeps
the leases. A notice only makes the worker read, from Postgres, who holds the runs it names.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable

from awooop.core import metrics
from awooop.core.db import Database
from awooop.core.listening import Notified, listen
from awooop.core.logs import get_logger
from awooop.runs import leases
from awooop.runs.control import CANCEL_CHANNEL
from awooop.runs.pauses import RESUME_CHANNEL
from awooop.runs.routing import ROUTE_CHANNEL, Routes, notice_served
from awooop.worker.attempts import StopReason
from awooop.worker.executor import Executor
from awooop.worker.outcomes import lease_lost

log = get_logger("awooop.worker")

# The least time between two checks of cancel notices: a flood of notices naming runs this
# process holds costs at most one read per gap, and a real cancel still stops its handler
# within a gap and a read.
CHECK_GAP_S = 0.1


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
        await listen(
            self.database_url,
            channels,
            stop,
            self.connected,
            name="cancel_listener",
            on_connected=self.reconnected,
        )

    def reconnected(self) -> None:
        """Notices sent while the listener was away are lost: check every attempt held here
        (one read of their rows). Under a worker session the heartbeat reads no run's row, so
        nothing else would find a cancel made meanwhile before the run's own renewal."""
        for rid, attempt in self.executor.attempts.items():
            if attempt.stop_reason is None and not attempt.finishing:
                self._asked.add(rid)
        if self._asked:
            self._ring.set()
