"""The worker's heartbeat (R-12) and its cancel listener.

Every ``heartbeat_interval_s`` one statement renews every lease this process holds. A run
missing from the answer lost its lease (reaped, taken by another worker, cancelled): its
handler is cancelled. Independently of the database, an attempt whose lease ran out by the
local clock (no renewal since ``lease_ttl_s`` after the last renewal was *sent*, which is never
later than the database's own ``lease_until``) is treated as lost too, so a worker cut off from
Postgres stops its handlers before anyone else may take the runs. After renewing, the worker
touches its own pending stream entries (``XCLAIM ... JUSTID`` to itself) so that reclaimers
do not take live work (R-16).

The heartbeat is a plain task with a fixed period rather than a backoff loop: a lease must be
renewed on time even after a failed round.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable

from awooop import metrics
from awooop.db import PLATFORM_ROLE, Connection, Database, connect
from awooop.logs import get_logger
from awooop.runs import leases
from awooop.runs.control import CANCEL_CHANNEL
from awooop.worker.context import Attempt, StopReason, StreamEntry
from awooop.worker.executor import Executor

log = get_logger("awooop.worker")

Toucher = Callable[[list[StreamEntry]], Awaitable[None]]


def lose(attempt: Attempt, why: str) -> None:
    if attempt.stop(StopReason.LOST):
        metrics.LEASE_LOSSES.inc()
        log.warning("lease_lost", run_id=str(attempt.run_id), attempt=attempt.number, why=why)


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
        self.db = db
        self.ttl_s = ttl_s
        self.interval_s = interval_s
        self.touch = touch
        self.rounds = 0

    async def beat(self) -> set[uuid.UUID]:
        """One round: expire by the local clock, renew in the database, touch entries."""
        attempts = self.executor.attempts
        now = time.monotonic()
        for attempt in list(attempts.values()):
            if not attempt.finishing and now >= attempt.lease_deadline:
                lose(attempt, "no renewal within the lease TTL")
        held = {rid: a for rid, a in attempts.items() if a.stop_reason is None}
        if not held:
            return set()
        sent = time.monotonic()
        worker_id = self.executor.worker_id
        renewed = await self.db.in_platform(
            lambda conn: leases.heartbeat(conn, worker_id, list(held), self.ttl_s)
        )
        self.rounds += 1
        metrics.LEASE_RENEWALS.inc(len(renewed))
        entries = []
        for rid, attempt in held.items():
            if rid in renewed:
                attempt.lease_deadline = max(attempt.lease_deadline, sent + self.ttl_s)
                if attempt.entry is not None:
                    entries.append(attempt.entry)
            elif attempts.get(rid) is attempt and not attempt.finishing:
                lose(attempt, "the heartbeat did not renew it")
        if entries and self.touch is not None:
            try:
                await self.touch(entries)
            except Exception as exc:
                log.warning("touch_failed", error=repr(exc), entries=len(entries))
        return renewed

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self.beat()
            except Exception as exc:
                log.warning("heartbeat_failed", error=repr(exc))
            delay = max(0.0, self.interval_s - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)


class CancelListener:
    """LISTEN on the cancel channel: a cancelled run's handler is cancelled at once.

    Reconnects with a pause when the connection drops; meanwhile the heartbeat still finds
    cancelled runs (their leases are no longer renewed)."""

    def __init__(self, executor: Executor, database_url: str) -> None:
        self.executor = executor
        self.database_url = database_url
        self.connected = asyncio.Event()

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        try:
            run_id = uuid.UUID(str(payload))
        except ValueError:
            return
        attempt = self.executor.attempts.get(run_id)
        if attempt is not None and attempt.stop(StopReason.CANCELLED):
            log.info("run_cancelled_by_operator", run_id=str(run_id))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            conn: Connection | None = None
            closed = asyncio.Event()
            try:
                conn = await connect(self.database_url, PLATFORM_ROLE)
                conn.add_termination_listener(lambda _c, closed=closed: closed.set())
                await conn.add_listener(CANCEL_CHANNEL, self._notified)
                self.connected.set()
                stopper = asyncio.ensure_future(stop.wait())
                dropped = asyncio.ensure_future(closed.wait())
                try:
                    await asyncio.wait({stopper, dropped}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopper.cancel()
                    dropped.cancel()
            except Exception as exc:
                log.warning("cancel_listener_failed", error=repr(exc))
            finally:
                self.connected.clear()
                if conn is not None and not conn.is_closed():
                    await conn.close(timeout=5)
            if not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
