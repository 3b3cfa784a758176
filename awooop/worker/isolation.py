"""Running suspects alone (R-13, R-19): the worker's isolated claims.

A suspect (:mod:`awooop.runs.leases.suspects`) was in flight on a worker that died while it
held other runs too; it must run alone, so that if it kills its worker again the death is its
own. The other claim paths leave suspects alone (their statements skip them, a stream delivery
for one is acknowledged: Postgres is where this loop finds them). Every ``AWOOOP_POLL_INTERVAL_S``
or lease TTL, whichever is shorter (a suspect exists because a lease ran out: it is looked for
at least that often, whatever the polling fallback's pace), or at once when a delivery named a
suspect, the worker asks Postgres
whether a suspect waits (one indexed probe); if one does it closes its intake (stream, reclaim
and polling claims wait at :meth:`Isolation.gate`), lets its in-flight runs finish, then claims
suspects one at a time (oldest first, ``FOR UPDATE SKIP LOCKED``: another worker may win) and
runs each with nothing else in flight, then opens its intake again.

The cost: while suspects wait, workers stop taking new work until their in-flight runs end;
suspects run one after another per worker. A drain that does not finish within one lease TTL
(a long run in flight) is given up: the worker takes work again for ``BACKOFF_POLLS`` of those
periods before it tries again, so long runs do not idle it. No new suspect is started once
the intake has been closed for one lease TTL: the deliveries waiting at the gate go in (a
delivery left waiting much longer would be reclaimed by other workers, each reclaim counting
towards ``AWOOOP_MAX_DELIVERIES``), and the next probe closes it again. The runs that wait
meanwhile show ``pending_isolation`` in ``blocked_on``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.eventlog.state import RunState
from awooop.runs.leases import suspects
from awooop.runs.routing import ALL, Routes
from awooop.worker.attempts import trace_metadata
from awooop.worker.executor import Executor
from awooop.worker.tasks import first_of

log = get_logger("awooop.worker.isolation")

BACKOFF_POLLS = 10  # poll intervals without isolation after a drain that did not finish
DRAIN_CHECK_S = 0.05  # how often a drain looks whether the worker is empty


class Isolation:
    """The gate in front of a worker's other claim paths, and the loop that runs suspects."""

    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        executor: Executor,
        worker_id: str,
        stopping: Callable[[], bool],
        routes: Routes = ALL,
    ) -> None:
        self.db = db
        self.routes = routes  # only suspects it serves (awooop.runs.routing)
        self.settings = settings
        self.executor = executor
        self.worker_id = worker_id
        self.stopping = stopping
        self._open = asyncio.Event()
        self._open.set()
        self._wake = asyncio.Event()
        self._claiming = 0  # claims of the other paths between the gate and their attempt

    # --- the gate (the other claim paths) ----------------------------------------------------

    @property
    def closed(self) -> bool:
        return not self._open.is_set()

    @contextlib.asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Around a claim of another path and the start of its attempt: waits while the
        intake is closed for a suspect; a drain waits for the claims admitted before it."""
        await self._open.wait()
        self._claiming += 1
        try:
            yield
        finally:
            self._claiming -= 1

    def wake(self) -> None:
        """A delivery named a suspect: look now rather than at the next poll interval."""
        self._wake.set()

    # --- the loop ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        period = min(self.settings.poll_interval_s, self.settings.lease_ttl_s)
        while not stop.is_set():
            await first_of(stop, self._wake, timeout_s=period)
            self._wake.clear()
            if stop.is_set() or self.stopping():
                return
            try:
                if not await self._waiting():
                    continue
                ttl = self.settings.lease_ttl_s
                if await self.run_suspects(drain_s=ttl, for_s=ttl) < 0:
                    await first_of(stop, timeout_s=period * BACKOFF_POLLS)
            except Exception as exc:
                log.warning("isolation_failed", error=repr(exc))

    async def run_suspects(self, drain_s: float, for_s: float | None = None) -> int:
        """Close the intake, wait up to ``drain_s`` for the worker to be empty, then claim and
        run suspects one at a time while there are any, starting none but the first after
        ``for_s`` seconds closed (None: no limit); the number run, -1 when the worker did not
        empty in time (nothing claimed)."""
        self._open.clear()
        closed_at = time.monotonic()
        try:
            if not await self._drained(drain_s):
                log.info("isolation_drain_gave_up", in_flight=len(self.executor.attempts))
                return -1
            count = 0
            while not self.stopping():
                if count and for_s is not None and time.monotonic() - closed_at > for_s:
                    break  # deliveries wait at the gate: let them in, look again later
                state = await self._claim()
                if state is None:
                    break
                count += 1
                metrics.LEASE_CLAIMS.labels("isolated").inc()
                log.info(
                    "suspect_running_alone",
                    run_id=str(state.run_id),
                    project_id=state.project_id,
                    attempt=state.attempt_count,
                    suspect_of=state.suspect_worker_id,
                )
                attempt = self.executor.begin(state, time.monotonic())
                await self.executor.run(attempt, state)
            return count
        finally:
            self._open.set()

    async def _waiting(self) -> bool:
        served = self.routes.params
        return await self.db.in_platform(lambda conn: suspects.suspects_waiting(conn, served))

    async def _drained(self, within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while self.executor.attempts or self._claiming:
            if time.monotonic() >= deadline or self.stopping():
                return False
            await asyncio.sleep(DRAIN_CHECK_S)
        return True

    async def _claim(self) -> RunState | None:
        settings = self.settings
        meta = trace_metadata()
        return await self.db.in_platform_writes(
            lambda conn: suspects.claim_suspect(
                conn, self.worker_id, settings.claim_ttl_s, meta, self.routes.params
            ),
            timeout_s=settings.lease_io_timeout_s,
        )


__all__ = ["BACKOFF_POLLS", "Isolation"]
