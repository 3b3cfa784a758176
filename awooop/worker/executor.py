"""Running one claimed attempt: the handler task, its end, and the fenced last write.

The executor owns the attempts this process holds (``attempts``, by run id). For each it runs
the handler in its own task (so a heartbeat, a cancel notice or shutdown can cancel it) and
writes the attempt's last event, fenced:

| handler ends with            | written            | outcome          |
|------------------------------|--------------------|------------------|
| a return value               | ``RunCompleted``   | COMPLETED        |
| an exception                 | ``RunFailed``      | FAILED           |
| Postgres/Redis unavailable   | nothing            | ERROR            |
| ``wait_for_approval``        | (already written)  | WAITING_APPROVAL |
| cancelled: lease lost        | nothing            | LOST             |
| cancelled: run cancelled     | nothing            | CANCELLED        |
| cancelled: shutdown          | ``LeaseReleased``  | RELEASED         |

A refused (fenced) last write is LOST: another attempt or an operator owns the run now. The
database being unavailable for the last write (a connection-level error) is ERROR: nothing is
acknowledged, the lease runs out, the reaper or a reclaimer takes the run again. Only ERROR
leaves the stream message pending.

Last writes go through group commits shared with other runs (:mod:`awooop.core.batching`): an error
caused by one run's data is that run's alone. A return value that Postgres cannot store (text
with ``\\u0000``, found before the statement by :mod:`awooop.core.storable`, or refused by Postgres
and isolated by the batcher: :func:`awooop.core.batching.data_error`) FAILS the run with
E-DATA-001 and a reason naming the value's place; its neighbours complete. A ``RunFailed``
whose own reason cannot be stored is written again with a reason that can. Any other error
of a last write (a conflict that outlasted its retries) is ERROR as above.

The runtime's own stores being unavailable for a moment (a Postgres restart under a journal
write, the pointer check before a model call: ``DatabaseUnavailableError``,
``RedisUnavailableError``) is not the run's failure: the attempt ends as ERROR too, and the run
is taken again once its lease has run out (counted against ``max_attempts`` by the reaper).
Failing it would depend on whether Postgres was back in time for the ``RunFailed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context

from awooop.core import metrics
from awooop.core.batching import Batcher, data_error
from awooop.core.config import Settings
from awooop.core.context import bound
from awooop.core.db import Database
from awooop.core.errors import (
    AwoooPError,
    DatabaseUnavailableError,
    HandlerError,
    LeaseLostError,
    RedisUnavailableError,
    UnstorableValueError,
)
from awooop.core.events import Event, LeaseReleased, RunFailed
from awooop.core.logs import get_logger
from awooop.core.retries import unavailable_on_connection_errors
from awooop.core.storable import sanitized, unstorable
from awooop.core.telemetry import exporting, tracer
from awooop.log.state import RunState
from awooop.runs import leases
from awooop.worker import tracelinks
from awooop.worker.context import (
    Attempt,
    LLMClient,
    Notifier,
    RunContext,
    StopReason,
    StreamEntry,
    Suspended,
    trace_metadata,
)

log = get_logger("awooop.worker")
# Group-commit flushes of one project that may run at once (claims, and fenced writes): one at
# a time capped a worker at (batch size / transaction time), and with runs finishing one by one
# the batches stay small (1 worker: ~300 no-op runs/s while its CPU was 80 % idle).
FLUSHES_PER_PROJECT = 4

Handler = Callable[[RunContext], Awaitable[object]]
MAX_REASON_CHARS = 2000


class Outcome(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    WAITING_APPROVAL = "waiting_approval"
    LOST = "lost"
    CANCELLED = "cancelled"
    RELEASED = "released"
    ERROR = "error"

    @property
    def ack(self) -> bool:
        """Whether the run's stream message is done with (see the module docstring)."""
        return self is not Outcome.ERROR


def lease_lost(attempt: Attempt, why: str) -> None:
    """Stop ``attempt``: its lease is gone or can no longer be trusted (``why``)."""
    if attempt.stop(StopReason.LOST):
        metrics.LEASE_LOSSES.inc()
        log.warning("lease_lost", run_id=str(attempt.run_id), attempt=attempt.number, why=why)


def _local_deadline_passed(attempt: Attempt) -> None:
    lease_lost(attempt, "the local lease deadline passed without a confirmed renewal")


def own_trace(attempt_number: int, parent: Context | None) -> bool:
    """Whether an attempt's ``run`` span starts a trace of its own (a retry, or nothing
    sampled to be a child of: polling, a context from an unsampled loop iteration) rather
    than continuing ``parent`` (None: the current context)."""
    if attempt_number > 1:
        return True
    context = trace.get_current_span(parent).get_span_context()
    return not (context.is_valid and context.trace_flags.sampled)


def infrastructure_failure(exc: BaseException) -> bool:
    """Pure: whether a handler ended because the runtime's own stores were unavailable (the
    attempt is abandoned, not the run failed)."""
    return isinstance(exc, DatabaseUnavailableError | RedisUnavailableError)


def failure_of(exc: BaseException) -> tuple[str, str]:
    """Pure: the (code, reason) a handler exception fails the run with. The reason is
    storable whatever the exception says (NUL and lone surrogates escaped)."""
    code = exc.code if isinstance(exc, AwoooPError) else HandlerError.code
    text = str(exc)
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return code, sanitized(reason[:MAX_REASON_CHARS])


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
        self.notifier = notifier
        self.attempts: dict[uuid.UUID, Attempt] = {}
        # Handler tasks by run, until they have really ended (a cancelled handler may take a
        # while): a later attempt of the same run waits for its predecessor here.
        self.handlers: dict[uuid.UUID, asyncio.Task[object]] = {}
        self.drained = asyncio.Event()
        self.drained.set()
        self.finished: dict[Outcome, int] = dict.fromkeys(Outcome, 0)
        self.writes: Batcher[str, leases.FencedWrite, RunState] = Batcher(
            self._flush_writes, parallel=FLUSHES_PER_PROJECT
        )
        # Completions, the commonest last write, go as one statement each batch
        # (leases.complete_many). An attempt's completion comes after all its other writes
        # returned, so the two batchers never hold writes of one run at once.
        self.completions: Batcher[str, leases.Completion, RunState] = Batcher(
            self._flush_completions, parallel=FLUSHES_PER_PROJECT
        )

    # Both flushes answer per write: a lost lease, or a value Postgres would refuse, is that
    # write's error. When the statement itself fails, the batcher flushes each write alone,
    # so an error only Postgres detects is still that write's own (awooop.core.batching).
    async def _flush_writes(
        self, project_id: str, writes: list[leases.FencedWrite]
    ) -> list[RunState | BaseException]:
        # On the run pool (platform role), as the claims: the fence (run id, worker, attempt,
        # live lease) already names the one row each write may touch, and no tenant to set saves
        # a round trip per batch. Batches stay per project.
        results = await self.db.in_run_transaction(
            lambda conn: leases.fenced_record_many(conn, writes)
        )
        return list(results)

    async def _flush_completions(
        self, _project_id: str, completions: list[leases.Completion]
    ) -> list[RunState | BaseException]:
        results = await self.db.in_run_statement(
            lambda conn: leases.complete_many(conn, completions)
        )
        return list(results)

    async def write(self, project_id: str, write: leases.FencedWrite) -> RunState:
        """A fenced write, batched with the other attempts' writes of the project (group
        commit); raises E-RUN-002 when the attempt no longer holds its lease."""
        with unavailable_on_connection_errors("a fenced write failed"):
            return await self.writes.submit(project_id, write, unique=write.run_id)

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
        )
        self.hold(attempt, lease_sent)
        self.attempts[state.run_id] = attempt
        self.drained.clear()
        return attempt

    def hold(self, attempt: Attempt, confirmed_sent: float) -> None:
        """Postgres confirmed the lease of ``attempt`` by a statement sent at ``confirmed_sent``
        (monotonic): the local deadline moves to that time + TTL - the safety margin."""
        ttl = self.settings.lease_ttl_s - self.settings.lease_safety_margin_s
        attempt.hold_until(confirmed_sent + ttl, _local_deadline_passed)

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
            with (
                bound(project_id=state.project_id, run_id=str(state.run_id)),
                tracer.start_as_current_span(
                    "run",
                    context=parent,
                    links=links,
                    attributes={
                        "awooop.run_id": str(state.run_id),
                        "awooop.project_id": state.project_id,
                        "awooop.attempt": attempt.number,
                        "awooop.worker_id": self.worker_id,
                    },
                ) as span,
            ):
                outcome = await self._run(attempt, state)
                span.set_attribute("awooop.outcome", str(outcome))
                return outcome
        finally:
            attempt.disarm()
            if self.attempts.get(attempt.run_id) is attempt:
                del self.attempts[attempt.run_id]
            if not self.attempts:
                self.drained.set()

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

    async def _run(self, attempt: Attempt, state: RunState) -> Outcome:
        ctx = RunContext(
            attempt=attempt,
            state=state,
            db=self.db,
            writer=functools.partial(self.write, state.project_id),
            llm=self.llm,
            notifier=self.notifier,
            approval_ttl_s=self.settings.approval_ttl_s,
            io_timeout_s=self.settings.lease_io_timeout_s,
        )
        if not await self._predecessor_ended(attempt):
            if attempt.stop_reason is not None:
                return await self._stopped(attempt)
            attempt.finishing = True
            return await self._last_write(
                attempt,
                Outcome.RELEASED,
                lambda _s, now: LeaseReleased(
                    at=now, worker_id=self.worker_id, attempt=attempt.number
                ),
            )
        task: asyncio.Task[object] = asyncio.create_task(
            self._invoke(ctx), name=f"run-{state.run_id}-{attempt.number}"
        )
        attempt.task = task
        self.handlers[state.run_id] = task
        task.add_done_callback(functools.partial(self._handler_ended, state.run_id))
        if attempt.stop_reason is not None:  # stopped between claim and start
            task.cancel()
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            # Our caller is being cancelled: treat it as a shutdown of this attempt.
            attempt.stop(StopReason.SHUTDOWN)
            with contextlib.suppress(BaseException):
                await asyncio.wait({task}, timeout=self.settings.shutdown_grace_s)
            await self._settle(attempt, task)
            raise
        return await self._settle(attempt, task)

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

    def _handler_ended(self, run_id: uuid.UUID, task: asyncio.Task[object]) -> None:
        if self.handlers.get(run_id) is task:
            del self.handlers[run_id]

    async def _invoke(self, ctx: RunContext) -> object:
        return await self.handler(ctx)

    async def _settle(self, attempt: Attempt, task: asyncio.Task[object]) -> Outcome:
        if not task.done():
            return self._count(attempt, Outcome.ERROR)
        if task.cancelled():
            return await self._stopped(attempt)
        exc = task.exception()
        if exc is None:
            result = task.result()
            return await self._complete(attempt, result)
        if isinstance(exc, Suspended):
            return self._count(attempt, Outcome.WAITING_APPROVAL)
        if attempt.stop_reason is not None:
            return await self._stopped(attempt)
        if isinstance(exc, LeaseLostError):
            return self._count(attempt, Outcome.LOST)
        if infrastructure_failure(exc):
            code, reason = failure_of(exc)
            log.warning("attempt_abandoned", code=code, reason=reason, exc_info=exc)
            return self._count(attempt, Outcome.ERROR)
        return await self._fail(attempt, exc)

    async def _stopped(self, attempt: Attempt) -> Outcome:
        reason = attempt.stop_reason or StopReason.SHUTDOWN
        if reason is StopReason.LOST:
            return self._count(attempt, Outcome.LOST)
        if reason is StopReason.CANCELLED:
            return self._count(attempt, Outcome.CANCELLED)
        attempt.finishing = True
        return await self._last_write(
            attempt,
            Outcome.RELEASED,
            lambda _s, now: LeaseReleased(at=now, worker_id=self.worker_id, attempt=attempt.number),
        )

    async def _complete(self, attempt: Attempt, result: object) -> Outcome:
        attempt.finishing = True
        try:
            encoded = msgspec.to_builtins(result)
        except (TypeError, ValueError) as exc:
            return await self._fail(attempt, exc)
        completion = leases.Completion(
            attempt.run_id, self.worker_id, attempt.number, encoded, trace_metadata()
        )
        return await self._settle_write(
            attempt,
            Outcome.COMPLETED,
            self.completions.submit(attempt.project_id, completion, unique=attempt.run_id),
        )

    async def _fail(self, attempt: Attempt, exc: BaseException) -> Outcome:
        attempt.finishing = True
        code, reason = failure_of(exc)
        log.warning("handler_failed", code=code, reason=reason, exc_info=exc)
        return await self._last_write(
            attempt,
            Outcome.FAILED,
            lambda _s, now: RunFailed(
                at=now, reason=reason, code=code, worker_id=self.worker_id, attempt=attempt.number
            ),
        )

    async def _last_write(
        self, attempt: Attempt, outcome: Outcome, make: Callable[[RunState, datetime], Event]
    ) -> Outcome:
        fenced = leases.FencedWrite(
            attempt.run_id, self.worker_id, attempt.number, make, trace_metadata()
        )
        return await self._settle_write(attempt, outcome, self.write(attempt.project_id, fenced))

    async def _settle_write(
        self,
        attempt: Attempt,
        outcome: Outcome,
        written: Awaitable[RunState],
        *,
        last_resort: bool = False,
    ) -> Outcome:
        """Await the attempt's fenced last write and count what came of it (see the module
        docstring: a data error fails the run, a lost lease is LOST, the rest ERROR)."""
        try:
            await written
        except LeaseLostError as exc:
            log.info("last_write_fenced", outcome=str(outcome), reason=exc.message)
            return self._count(attempt, Outcome.LOST)
        except Exception as exc:
            if data_error(exc) and outcome is Outcome.COMPLETED:
                # This run's return value, not the database: the run fails, with a reason
                # that names the value's place (and does not hold the value).
                return await self._fail(attempt, unstorable("the return value", exc))
            if data_error(exc) and outcome is Outcome.FAILED and not last_resort:
                return await self._fail_plainly(attempt, exc)
            log.exception("last_write_failed", outcome=str(outcome))
            return self._count(attempt, Outcome.ERROR)
        if outcome in (Outcome.COMPLETED, Outcome.FAILED):
            metrics.RUNS_FINISHED.labels(outcome.name).inc()
        return self._count(attempt, outcome)

    async def _fail_plainly(self, attempt: Attempt, exc: BaseException) -> Outcome:
        """A RunFailed that Postgres refused (its reason should always be storable: this is
        the last resort): fail the run with a fixed reason instead."""
        log.error("run_failed_unstorable", error=f"{type(exc).__name__}: {exc}")
        error = UnstorableValueError(
            f"the run failed, and its failure reason could not be stored ({type(exc).__name__})"
        )
        fenced = leases.FencedWrite(
            attempt.run_id,
            self.worker_id,
            attempt.number,
            lambda _s, now: RunFailed(
                at=now,
                reason=error.message,
                code=error.code,
                worker_id=self.worker_id,
                attempt=attempt.number,
            ),
        )
        return await self._settle_write(
            attempt, Outcome.FAILED, self.write(attempt.project_id, fenced), last_resort=True
        )

    def _count(self, attempt: Attempt, outcome: Outcome) -> Outcome:
        self.finished[outcome] += 1
        log.info(
            "attempt_finished",
            outcome=str(outcome),
            attempt=attempt.number,
            seconds=round(time.monotonic() - attempt.started, 4),
        )
        return outcome
