"""A worker process: take runs under the Postgres lease, run them, renew, recover, stop cleanly.

Ways a run reaches this worker (the lease is the authority in every one of them):

- **the work stream** (R-16): the relay announces every dispatch event; a delivery names the
  run, the worker takes the lease with one conditional statement
  (:func:`awooop.worker.claims.claim_announced`) and runs it. No lease, no execution: the
  message is acknowledged when the run is finished, cancelled, waiting for approval, paused (a
  resume rings the polling path: resume_bell.py) or deferred by the fair order between
  projects (the deferral rings it), and left pending while a live lease elsewhere holds it.
- **reclaim** (R-16): entries idle past the lease, reconciled (:mod:`awooop.worker.reclaim`).
- **polling** (R-11, R-33): every ``poll_interval_s``, dispatchable runs that waited that long
  and runs whose lease expired, ``FOR UPDATE SKIP LOCKED`` (the only path without streams).
Every path claims only runs the worker serves (``routes``: awooop.runs.routing, and version),
under the worker's session (awooop.worker.heartbeat). ``run(stop)`` serves until ``stop``,
then stops taking work, gives in-flight runs ``shutdown_grace_s``, cancels the rest and hands
their leases back (docs/workers.md, Shutdown). ``run_until_idle()``: the burst mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context

from awooop.core import metrics
from awooop.core.batching import Batcher
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.core.telemetry import tracer
from awooop.eventlog.state import RunState
from awooop.runs.leases import Availability
from awooop.runs.routing import ALL, Routes
from awooop.worker import burst, claims, handler_version
from awooop.worker.attempts import StopReason, StreamEntry, trace_metadata
from awooop.worker.cancels import CancelListener
from awooop.worker.claims import Claimed
from awooop.worker.context import LLMClient, Notifier
from awooop.worker.executor import Executor, Handler
from awooop.worker.heartbeat import Heartbeat, Toucher
from awooop.worker.isolation import Isolation
from awooop.worker.last_writes import FLUSHES_PER_PROJECT
from awooop.worker.outcomes import Outcome
from awooop.worker.resume_bell import ResumeBell
from awooop.worker.tasks import finish

log = get_logger("awooop.worker")

NO_STREAM_POLL_S = 0.2  # idle poll period when polling is the only path
BUSY_POLL_AGE_FACTOR = 10  # see Worker.poll_min_age


def new_worker_id() -> str:
    """Unique per process start: host, pid and a random suffix (pids are reused)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        handler: Handler,
        concurrency: int | None = None,
        worker_id: str | None = None,
        llm: LLMClient | None = None,
        notifier: Notifier | None = None,
        streams: bool = False,
        touch: Toucher | None = None,
        routes: Routes = ALL,
    ) -> None:
        self.db = db
        routes = self.routes = handler_version.versioned(routes, handler, settings)  # routing.py
        # Every claim, completion, fenced write and renewal on the run pool ends within this
        # bound (awooop.core.bounded.bounded), shorter than the local lease (settings check).
        db.run_timeout_s = settings.lease_io_timeout_s
        self.settings = settings
        self.worker_id = worker_id or new_worker_id()
        self.concurrency = concurrency or settings.worker_concurrency
        self.streams = streams
        self.executor = Executor(
            db=db,
            settings=settings,
            handler=handler,
            worker_id=self.worker_id,
            llm=llm,
            notifier=notifier,
        )
        self.heartbeat = Heartbeat(
            self.executor,
            db,
            ttl_s=settings.lease_ttl_s,
            interval_s=settings.heartbeat_interval_s,
            touch=touch,
        )
        self.resume_bell = ResumeBell()  # a resumed pause: poll at once (resume_bell.py)
        self.executor.slots.on_ring = self.resume_bell.ring  # so does a key's freed slot
        self.cancel_listener = CancelListener(
            self.executor,
            settings.database_url,
            db,
            on_resume=self.resume_bell.ring,
            routes=routes,
            on_route=self.resume_bell.owe,  # a start owed to each run routed here (routing.py)
        )
        self.accepting = True
        self.claims: Batcher[str, tuple[uuid.UUID, dict[str, Any]], Claimed] = Batcher(
            lambda _project, items: claims.claim_announced(
                db, settings, self.worker_id, items, routes
            ),
            parallel=FLUSHES_PER_PROJECT,
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._slot_freed = asyncio.Event()
        self.on_freed: list[Callable[[], None]] = []  # told when an attempt here ends
        self.claiming = 0  # claims under way (take(), local timers): slots spoken for (free_slots)
        # Suspects run alone: the gate of the other claim paths, and the loop that runs them.
        self.isolation = Isolation(
            db=db,
            settings=settings,
            executor=self.executor,
            worker_id=self.worker_id,
            stopping=self.stopping,
            routes=routes,
        )
        # Deliveries handled so far by the stream intake (set by it): polling backs off while
        # this moves.
        self.intake_activity: Callable[[], int] | None = None
        self._last_activity = 0

    # --- taking one announced run (stream delivery, reclaim) -----------------------------------

    def _orphaned_claim(self, got: Claimed | RunState) -> None:
        """A claim whose requester was cancelled (shutdown) before it returned: hand the lease
        back at once instead of letting it run out."""
        state = got.state if isinstance(got, Claimed) else got
        if state is None:
            return
        write = claims.release(state, self.worker_id)

        async def release() -> None:
            try:
                await self.executor.write(state.project_id, write)
            except Exception as exc:  # the lease runs out instead; the reaper recovers the run
                log.warning("orphaned_claim_release_failed", error=repr(exc))

        self.spawn(release())

    async def take(
        self,
        run_id: uuid.UUID,
        project_id: str,
        *,
        path: str,
        entry: StreamEntry | None = None,
        parent: Context | None = None,
        links: list[trace.Link] | None = None,
    ) -> bool:
        """Take the lease of an announced run and run it; True when its message is done with
        (acknowledge), False to leave it pending."""
        if not self.accepting:
            return False
        async with self.isolation.admitted():  # waits while a suspect runs alone here
            if self.stopping():  # shutdown began while it waited
                return False
            sent = time.monotonic()
            with tracer.start_as_current_span(
                "lease claim",
                context=parent,
                links=links,
                attributes={"awooop.run_id": str(run_id), "awooop.claim_path": path},
            ) as span:
                meta = trace_metadata()
                self.claiming += 1
                try:
                    got = await self.claims.submit(
                        project_id, (run_id, meta), unique=run_id, on_orphan=self._orphaned_claim
                    )
                finally:
                    self.claiming -= 1
                state = got.state
                if state is None:
                    assert got.seen is not None
                    if got.seen in (Availability.SUSPECT, Availability.EXPIRED):
                        self.isolation.wake()  # a suspect (now, or once reaped) waits
                    elif got.seen in claims.OWES_A_TURN:
                        self.resume_bell.owe()  # polling takes the fair order's head now
                    state, settled = await claims.take_if_expired(
                        self.db,
                        self.settings,
                        self.worker_id,
                        run_id,
                        project_id,
                        got.seen,
                        meta,
                        self.routes,
                    )
                    if state is None:
                        span.set_attribute("awooop.claimed", False)
                        return settled
                span.set_attribute("awooop.claimed", True)
            metrics.LEASE_CLAIMS.labels(path).inc()
            if self.stopping():  # shut down while the claim was under way: hand it back at once
                self._orphaned_claim(state)
                return True
            attempt = self.executor.begin(state, sent, entry)
        outcome = await self.executor.run(attempt, state, parent=parent, links=links)
        self._freed(state)
        return outcome.ack

    # --- the polling path -------------------------------------------------------------------

    def free_slots(self) -> int:
        return max(0, self.concurrency - len(self.executor.attempts) - self.claiming)

    async def poll_once(self, min_age_s: float | None = None) -> int:
        """Claim what the polling path may take now and start running it; return how many."""
        free = self.free_slots()
        if free <= 0 or not self.accepting or self.isolation.closed:
            return 0
        min_age = self.settings.poll_interval_s if min_age_s is None else min_age_s
        async with self.isolation.admitted():
            sent = time.monotonic()
            with tracer.start_as_current_span(
                "lease claim", attributes={"awooop.claim_path": "poll"}
            ) as span:
                meta = trace_metadata()
                states = await claims.claim_polled(
                    self.db, self.settings, self.worker_id, free, min_age, meta, self.routes
                )
                span.set_attribute("awooop.claimed", len(states))
            return self.start(states, sent, "poll")

    def start(self, states: list[RunState], sent: float, path: str) -> int:
        """Run the attempts of leases just taken by ``path`` with a statement sent at ``sent``
        (monotonic); when shutdown began meanwhile, hand them back. Returns how many started."""
        if states:
            metrics.LEASE_CLAIMS.labels(path).inc(len(states))
        if self.stopping():  # shut down while the claim was under way: hand them back
            for state in states:
                self._orphaned_claim(state)
            return 0
        for state in states:
            attempt = self.executor.begin(state, sent)
            self.spawn(self._run_claimed(attempt, state))
        return len(states)

    async def _run_claimed(self, attempt: Any, state: RunState) -> None:
        await self.executor.run(attempt, state)
        self._freed(state)

    def _freed(self, state: RunState) -> None:
        self._slot_freed.set()  # a keyed run freed its key's slot: poll for the refused ones
        for hook in self.on_freed:
            hook()
        if state.concurrency_key is not None:
            self.executor.slots.ring()  # (resume_bell.ring) and tool waits here try again

    def poll_min_age(self) -> float:
        """How long a dispatchable run must have waited before polling takes it.

        Without streams: any age. With streams: one poll interval while the stream intake is
        idle (Redis lost the messages, or there are none), ten while deliveries keep arriving
        (a backlog in the stream is not a lost message: taking it here too would only make
        its deliveries find the run taken)."""
        if not self.streams:
            return 0.0
        seen = self.intake_activity() if self.intake_activity is not None else 0
        busy, self._last_activity = seen != self._last_activity, seen
        normal = self.settings.poll_interval_s * (BUSY_POLL_AGE_FACTOR if busy else 1)
        return self.resume_bell.min_age(normal)

    async def _poll_loop(self, stop: asyncio.Event) -> None:
        period = self.settings.poll_interval_s if self.streams else NO_STREAM_POLL_S
        while not stop.is_set():
            self._slot_freed.clear()
            self.resume_bell.rung.clear()
            had_room = self.free_slots() > 0
            try:
                claimed = await self.poll_once(self.poll_min_age())
            except Exception as exc:
                log.warning("poll_failed", error=repr(exc))
                claimed = 0
            self.resume_bell.polled(claimed, had_room)
            if claimed and self.free_slots() > 0:
                continue  # there may be more
            waiters = [
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(self.resume_bell.rung.wait()),
            ]
            if claimed or not self.streams or self.resume_bell.draining:
                waiters.append(asyncio.ensure_future(self._slot_freed.wait()))
            try:
                await asyncio.wait(waiters, timeout=period, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    # --- lifecycle --------------------------------------------------------------------------

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run(
        self,
        stop: asyncio.Event,
        extra: list[Callable[[asyncio.Event], Awaitable[None]]] | None = None,
    ) -> None:
        """Serve until ``stop`` is set, then shut down gracefully. ``extra`` are coroutines
        (stream consumer, reclaim loop) that take work and stop with the intake."""
        log.info(
            "worker_started",
            worker_id=self.worker_id,
            concurrency=self.concurrency,
            streams=self.streams,
        )
        intake_stop = asyncio.Event()
        life_stop = asyncio.Event()
        await self.heartbeat.open(stop)  # the worker's session, before its first claim
        intake = [
            asyncio.ensure_future(self._poll_loop(intake_stop)),
            asyncio.ensure_future(self.isolation.run(intake_stop)),
        ]
        intake += [asyncio.ensure_future(fn(intake_stop)) for fn in extra or []]
        life = [
            asyncio.ensure_future(self.heartbeat.run(life_stop)),
            asyncio.ensure_future(self.cancel_listener.run(life_stop)),
        ]
        try:
            await stop.wait()
        finally:
            log.info("worker_stopping", worker_id=self.worker_id, in_flight=self.in_flight)
            self.accepting = False
            intake_stop.set()
            # In-flight runs finish or are released first, so that the stream consumer can
            # acknowledge their messages before it stops.
            await self.drain(self.settings.shutdown_grace_s)
            await finish(intake, wait_s=10)
            await self.drain(0.0)  # claims that completed while the intake stopped: hand back
            life_stop.set()
            await finish(life, wait_s=10)
            log.info(
                "worker_stopped",
                worker_id=self.worker_id,
                finished={str(k): v for k, v in self.executor.finished.items() if v},
            )

    def stopping(self) -> bool:
        return not self.accepting

    @property
    def slot_freed(self) -> asyncio.Event:
        """Set when an attempt here ends (a slot is free again)."""
        return self._slot_freed

    @property
    def tasks(self) -> set[asyncio.Task[Any]]:
        """The tasks :meth:`spawn` started that have not ended."""
        return self._tasks

    @property
    def in_flight(self) -> int:
        return len(self.executor.attempts)

    async def drain(self, grace_s: float) -> None:
        """Let in-flight runs finish for ``grace_s``; then cancel the rest and release their
        leases (the executor writes ``LeaseReleased``)."""
        self.accepting = False
        if self.executor.attempts:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.executor.drained.wait(), timeout=grace_s)
        for attempt in list(self.executor.attempts.values()):
            attempt.stop(StopReason.SHUTDOWN)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=30)
        if self.executor.attempts:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.executor.drained.wait(), timeout=30)

    async def run_until_idle(self, *, max_s: float = 60.0) -> int:
        """Burst mode: claim and run everything runnable now (polling, any age); return the
        number of attempts run. For tests and one-shot jobs (:mod:`awooop.worker.burst`)."""
        return await burst.run_until_idle(self, max_s=max_s)


__all__ = ["Outcome", "Worker", "new_worker_id"]
