"""Running one claimed attempt: the handler task, its end, and the fenced last write.

The executor owns the attempts this process holds (``attempts``, by run id). For each it runs
the handler in its own task (so a heartbeat, a cancel notice or shutdown can cancel it) and
writes the attempt's last event, fenced (:mod:`awooop.worker.last_writes`). Which outcome each
way of ending gives, and which of them leave the stream message pending:
:mod:`awooop.worker.outcomes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Awaitable, Callable

from opentelemetry import trace
from opentelemetry.context import Context

from awooop.core.config import Settings
from awooop.core.context import bound
from awooop.core.db import Database
from awooop.core.errors import LeaseLostError
from awooop.core.logs import get_logger
from awooop.core.spans import CurrentSpan
from awooop.core.telemetry import exporting, tracer
from awooop.eventlog.state import RunState
from awooop.runs import leases, output_log
from awooop.worker import tracelinks
from awooop.worker.attempts import RUN_SPAN, Attempt, Deadlines, StopReason, StreamEntry
from awooop.worker.context import LLMClient, Notifier, RunContext, Suspended
from awooop.worker.contract_retry import ContractBodies, ContractRetry
from awooop.worker.durable_waits import Waiting
from awooop.worker.last_writes import LastWrites
from awooop.worker.outcomes import (
    Outcome,
    failure_of,
    infrastructure_failure,
    local_deadline_passed,
    own_trace,
)
from awooop.worker.output import OutputBuffer
from awooop.worker.tasks import Ended
from awooop.worker.tool_waits import SlotBell

log = get_logger("awooop.worker")

Handler = Callable[[RunContext], Awaitable[object]]


class Executor:
    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        handler: Handler,
        worker_id: str,
        llm: LLMClient | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.handler = handler
        self.worker_id = worker_id
        self.llm = llm
        # Asked once: an isinstance of a runtime-checkable Protocol walks the class's members
        # on every call (about 10 us on Python 3.11), and every attempt's start needs it.
        self.contract_bodies = llm if isinstance(llm, ContractBodies) else None
        self.notifier = notifier
        self.attempts: dict[uuid.UUID, Attempt] = {}
        # Handler tasks by run, until they have really ended (a cancelled handler may take a
        # while): a later attempt of the same run waits for its predecessor here.
        self.handlers: dict[uuid.UUID, asyncio.Task[object]] = {}
        self.drained = asyncio.Event()
        self.slots = SlotBell()  # a keyed attempt here freed a slot (tool_waits.py)
        self.drained.set()
        self.finished: dict[Outcome, int] = dict.fromkeys(Outcome, 0)
        self.deadlines = Deadlines(local_deadline_passed)  # the timers of the local deadlines
        # The send time (monotonic) of the last renewal of the worker's session that Postgres
        # confirmed; None: no session yet, or it was lost (awooop.worker.heartbeat).
        self.session_confirmed: float | None = None
        self.last_writes = LastWrites(
            db=db, worker_id=worker_id, result_max_bytes=settings.step_result_max_bytes
        )
        # The group commits, read by tests and the runtime's metrics.
        self.writes = self.last_writes.writes
        self.completions = self.last_writes.completions
        # Told of each sleep written (the state after it, the sleep's step): the worker's own
        # timers (awooop.worker.local_timers) fire it when it is due.
        self.sleeping: Callable[[RunState, str], None] | None = None

    async def write(self, project_id: str, write: leases.FencedWrite) -> RunState | None:
        """A fenced write, batched with the other attempts' writes of the project (group
        commit): the run's new state (None: journal events, whose row is not read back);
        raises E-RUN-002 when the attempt no longer holds its lease."""
        if not isinstance(write, leases.Sleep):
            return await self.last_writes.write(project_id, write)
        state = await self.last_writes.sleep(project_id, write)
        if self.sleeping is not None:
            self.sleeping(state, write.step)
        return state

    def begin(
        self, state: RunState, lease_sent: float, entry: StreamEntry | None = None
    ) -> Attempt:
        """Register a lease just taken (``lease_sent``: monotonic time the claim was sent)."""
        assert state.worker_id == self.worker_id
        attempt = Attempt(
            run_id=state.run_id,
            project_id=state.project_id,
            worker_id=self.worker_id,
            number=state.attempt_count,
            lease_deadline=0.0,
            entry=entry,
            parent_run_id=state.parent_run_id,
        )
        self.hold(attempt, lease_sent)
        self.attempts[state.run_id] = attempt
        self.drained.clear()
        return attempt

    def hold(self, attempt: Attempt, confirmed_sent: float) -> None:
        """Postgres confirmed the run's own lease of ``attempt`` (its claim or a renewal) by a
        statement sent at ``confirmed_sent`` (monotonic): the local deadline moves to that time
        + the lease, less the safety margin. Under a worker session the run's own lease is
        longer and the session's bounds it too (:meth:`hold_session`)."""
        attempt.run_confirmed = confirmed_sent
        self.deadlines.hold_until(attempt, self._deadline(attempt))

    def hold_session(self, confirmed_sent: float | None) -> None:
        """Postgres confirmed (or, None, lost) the worker's session by a statement sent at
        ``confirmed_sent``: every attempt's local deadline moves with it."""
        self.session_confirmed = confirmed_sent
        if confirmed_sent is not None:
            for attempt in self.attempts.values():
                self.deadlines.hold_until(attempt, self._deadline(attempt))

    def _deadline(self, attempt: Attempt) -> float:
        s = self.settings
        if not s.session_leases or self.session_confirmed is None:
            # no session (yet): its runs' leases are at least their own claim's TTL
            return attempt.run_confirmed + s.local_lease_s
        own = attempt.run_confirmed + s.run_lease_s
        return min(own, self.session_confirmed + s.lease_ttl_s) - s.lease_safety_margin_s

    async def run(
        self,
        attempt: Attempt,
        state: RunState,
        *,
        parent: Context | None = None,
        links: list[trace.Link] | None = None,
    ) -> Outcome:
        """Run the handler for ``attempt`` and write its end; never raises except when the
        caller's own task is cancelled (then the lease is released first).

        The ``run`` span is a child of ``parent`` (default: the current span) for a first
        attempt in a sampled trace; otherwise it is a root span linked to the ingest and the
        previous attempt (:mod:`awooop.worker.tracelinks`)."""
        try:
            if exporting() and own_trace(attempt.number, parent):
                parent = Context()
                links = [*(links or []), *await self._history_links(state, attempt)]
            # One frame waits for the handler (a run in flight holds no second one): the
            # attempt's start and end are helpers that return before it waits.
            with (
                bound(project_id=state.project_id, run_id=str(state.run_id)),
                self._run_span(attempt, state, parent, links) as span,
            ):
                traceparent = tracelinks.exported_traceparent(span)
                stored = RUN_SPAN.set(traceparent) if traceparent != RUN_SPAN.get() else None
                try:
                    if not await self._predecessor_ended(attempt):
                        outcome = await self._not_started(attempt)
                    else:
                        task, end, output = self._start(attempt, state)
                        try:
                            await end.done
                        except asyncio.CancelledError:
                            await self._caller_cancelled(attempt, task)
                            raise
                        outcome = await self._settle(attempt, task)
                        await output.ring_end(self.ring)  # the run's end is written: look now
                finally:
                    if stored is not None:
                        RUN_SPAN.reset(stored)
                span.set_attribute("awooop.outcome", str(outcome))
                return outcome
        finally:
            self.deadlines.disarm(attempt)
            if self.attempts.get(attempt.run_id) is attempt:
                del self.attempts[attempt.run_id]
            if not self.attempts:
                self.drained.set()

    def _run_span(
        self,
        attempt: Attempt,
        state: RunState,
        parent: Context | None,
        links: list[trace.Link] | None,
    ) -> CurrentSpan:
        return tracer.start_as_current_span(
            "run",
            context=parent,
            links=links,
            attributes={
                "awooop.run_id": str(state.run_id),
                "awooop.project_id": state.project_id,
                "awooop.attempt": attempt.number,
                "awooop.worker_id": self.worker_id,
            },
        )

    async def _history_links(self, state: RunState, attempt: Attempt) -> list[trace.Link]:
        """The links of a root ``run`` span; none when the read fails (tracing never fails or
        holds up a run: the read is bounded by the lease I/O timeout)."""
        try:
            return await self.db.in_tenant(
                state.project_id,
                lambda conn: tracelinks.history_links(conn, state.run_id, attempt.number),
                timeout_s=self.settings.lease_io_timeout_s,
            )
        except Exception as exc:
            log.warning("run_trace_links_failed", run_id=str(state.run_id), error=repr(exc))
            return []

    def _start(
        self, attempt: Attempt, state: RunState
    ) -> tuple[asyncio.Task[object], Ended, OutputBuffer]:
        """The handler's task (its end, what the attempt waits on; its output buffer)."""
        output = OutputBuffer(attempt=attempt, db=self.db, settings=self.settings)
        ctx = RunContext(
            attempt=attempt,
            state=state,
            db=self.db,
            writer=functools.partial(self.write, state.project_id),
            llm=self.llm,
            notifier=self.notifier,
            approval_ttl_s=self.settings.approval_ttl_s,
            io_timeout_s=self.settings.lease_io_timeout_s,
            flow_max_wait_s=self.settings.llm_flow_max_wait_s,
            slots=self.slots,
            step_result_max_bytes=self.settings.step_result_max_bytes,
            overrides=ContractRetry.of_run(
                self.db,
                state,
                self.settings.lease_io_timeout_s,
                self.contract_bodies,
            ),
            output=output,
            settings=self.settings,
        )
        task: asyncio.Task[object] = asyncio.create_task(
            self._invoke(ctx, output), name=f"run-{state.run_id}-{attempt.number}"
        )
        attempt.task = task
        self.handlers[state.run_id] = task
        end = Ended(task, self.handlers, state.run_id)  # its entry goes when it has ended
        if attempt.stop_reason is not None:  # stopped between claim and start
            task.cancel()
        return task, end, output

    async def _not_started(self, attempt: Attempt) -> Outcome:
        """The end of an attempt whose handler did not start (its predecessor still runs)."""
        if attempt.stop_reason is not None:
            return await self._stopped(attempt)
        return self._count(attempt, await self.last_writes.release(attempt))

    async def _caller_cancelled(self, attempt: Attempt, task: asyncio.Task[object]) -> None:
        """The caller of :meth:`run` is being cancelled: a shutdown of this attempt."""
        attempt.stop(StopReason.SHUTDOWN)
        with contextlib.suppress(BaseException):
            await asyncio.wait({task}, timeout=self.settings.shutdown_grace_s)
        await self._settle(attempt, task)

    async def _predecessor_ended(self, attempt: Attempt) -> bool:
        """Whether no earlier attempt of this run still runs in this process (a process never
        runs two attempts of one run at once). An earlier handler was cancelled when its lease
        was lost; wait for it to end while the new lease holds. False: it has not ended (it
        ignores cancellation), or the new attempt was stopped meanwhile."""
        previous = self.handlers.get(attempt.run_id)
        if previous is None or previous.done():
            return attempt.stop_reason is None
        log.warning(
            "previous_attempt_still_running", run_id=str(attempt.run_id), attempt=attempt.number
        )
        previous.cancel()
        await asyncio.wait({previous}, timeout=max(0.0, attempt.lease_deadline - time.monotonic()))
        return previous.done() and attempt.stop_reason is None

    async def _invoke(self, ctx: RunContext, output: OutputBuffer) -> object:
        """The handler, then its output flushed (before the attempt's last write: a flush that
        fails fails the attempt as the handler raising that error would)."""
        try:
            result = await self.handler(ctx)
        except BaseException:
            await output.close_quietly()
            raise
        await output.close()
        return result

    async def ring(self, run_ids: list[str]) -> None:
        """Ring the output readers of ``run_ids`` (:mod:`awooop.runs.output_bell`)."""
        await self.last_writes.statements.notify(output_log.CHANNEL, run_ids)

    async def _settle(self, attempt: Attempt, task: asyncio.Task[object]) -> Outcome:
        if not task.done():
            return self._count(attempt, Outcome.ERROR)
        if task.cancelled():
            return await self._stopped(attempt)
        exc = task.exception()
        if exc is None:
            result = task.result()
            outcome = await self.last_writes.complete(attempt, result)
            if outcome is Outcome.ERROR:  # the completion could not be written
                outcome = await self.last_writes.give_back(attempt, "its completion failed")
            return self._count(attempt, outcome)
        if isinstance(exc, Suspended):
            waits = Outcome.WAITING_EVENT if isinstance(exc, Waiting) else Outcome.WAITING_APPROVAL
            return self._count(attempt, waits)
        if attempt.stop_reason is not None:
            return await self._stopped(attempt)
        if isinstance(exc, LeaseLostError):
            return self._count(attempt, Outcome.LOST)
        if infrastructure_failure(exc):
            code, reason = failure_of(exc)
            log.warning("attempt_abandoned", code=code, reason=reason, exc_info=exc)
            return self._count(attempt, await self.last_writes.give_back(attempt, reason, exc))
        return self._count(attempt, await self.last_writes.fail(attempt, exc))

    async def _stopped(self, attempt: Attempt) -> Outcome:
        reason = attempt.stop_reason or StopReason.SHUTDOWN
        if reason is StopReason.LOST:
            return self._count(attempt, Outcome.LOST)
        if reason is StopReason.CANCELLED:
            return self._count(attempt, Outcome.CANCELLED)
        return self._count(attempt, await self.last_writes.release(attempt))

    def _count(self, attempt: Attempt, outcome: Outcome) -> Outcome:
        self.finished[outcome] += 1
        log.info(
            "attempt_finished",
            outcome=str(outcome),
            attempt=attempt.number,
            seconds=round(time.monotonic() - attempt.started, 4),
        )
        return outcome
