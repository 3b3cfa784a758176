"""An attempt's fenced last write (``RunCompleted``, ``RunFailed``, ``LeaseReleased``), and the
group commits every fenced write of this process goes through.

A durable sleep's ``WaitStarted`` (:class:`awooop.runs.leases.Sleep`) is an attempt's last
write too: :meth:`LastWrites.write` sends it to the group commit of sleeps, one statement a
batch (``sleep_many.sql``), as completions go.

Last writes go through group commits shared with other runs (:mod:`awooop.core.batching`): an
error caused by one run's data is that run's alone. A return value that Postgres cannot store
(text with ``\\u0000``, found before the statement by :mod:`awooop.core.storable`, or refused
by Postgres and isolated by the batcher: :func:`awooop.core.batching.data_error`) FAILS the run
with E-DATA-001 and a reason naming the value's place; its neighbours complete. A ``RunFailed``
whose own reason cannot be stored is written again with a reason that can. Any other error of
a last write (a conflict that outlasted its retries) is ERROR; a refused (fenced) one is LOST
(:mod:`awooop.worker.outcomes`).

A child run's end (completion or failure) is a fenced write in a transaction of its own (not
the one-statement completion, not a group commit), so that its parent's wait is decided with it
(:mod:`awooop.eventlog.child_waits`).

An attempt that ends with an exception (``RunFailed``, or ``LeaseReleased`` when its stores
were away) keeps the exception's traceback (:func:`awooop.core.excerpts.failure_traceback`)
and the step the handler was in when it raised (:meth:`Attempt.step_of
<awooop.worker.attempts.Attempt.step_of>`) in that event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from awooop.core import metrics
from awooop.core.batching import Batcher, data_error
from awooop.core.config import STEP_RESULT_MAX_BYTES
from awooop.core.db import Database
from awooop.core.errors import AwoooPError, LeaseLostError, UnstorableValueError
from awooop.core.events import Event, LeaseReleased, RunCompleted, RunFailed
from awooop.core.excerpts import failure_traceback
from awooop.core.logs import get_logger
from awooop.core.retries import unavailable_on_store_errors
from awooop.core.storable import unstorable
from awooop.eventlog.state import RunState
from awooop.runs import leases
from awooop.worker.attempts import Attempt, trace_metadata
from awooop.worker.outcomes import Outcome, failure_of
from awooop.worker.step_values import journal

log = get_logger("awooop.worker")
# Group-commit flushes of one project that may run at once (claims, and fenced writes): one at
# a time capped a worker at (batch size / transaction time), and with runs finishing one by one
# the batches stay small (1 worker: ~300 no-op runs/s while its CPU was 80 % idle).
FLUSHES_PER_PROJECT = 4
# Writes (completions, sleeps) in one flush at most: a flush holds its writes' rows, their
# states before and after and the statement's buffers until it returns, FLUSHES_PER_PROJECT of
# them at once. Thousands of runs whose model calls answer together end their steps together:
# they are flushed 4 x 64 at a time, not all at once (run_memory.py --streams, 1,000 in
# flight: the peak RSS per run 24 KB with batches of 256, 20 KB with 64).
WRITE_BATCH = 64


# The pauses between tries of a give-back (doubling): the database was just away or refusing.
GIVE_BACK_FIRST_PAUSE_S = 0.2
GIVE_BACK_MAX_PAUSE_S = 5.0


class LastWrites:
    """Fenced writes of this process's attempts, batched per project; each last-write method
    returns the outcome to count."""

    def __init__(
        self, *, db: Database, worker_id: str, result_max_bytes: int = STEP_RESULT_MAX_BYTES
    ) -> None:
        self.statements = leases.RunStatements(db)
        self.worker_id = worker_id
        # A run's result is bounded as a step's is (AWOOOP_STEP_RESULT_MAX_BYTES): it is one
        # event, read by every replay and projector and fanned out to the streams.
        self.result_max_bytes = result_max_bytes
        # A write's answer: the run's new state, or None for journal events written by the
        # one-statement journal (their row is not read back: leases.journal_many).
        self.writes: Batcher[str, leases.FencedWrite, RunState | None] = Batcher(
            self._flush_writes, parallel=FLUSHES_PER_PROJECT, max_batch=WRITE_BATCH
        )
        # Completions, the commonest last write, go as one statement each batch
        # (leases.complete_many). An attempt's completion comes after all its other writes
        # returned, so the two batchers never hold writes of one run at once.
        self.completions: Batcher[str, leases.Completion, None] = Batcher(
            self._flush_completions, parallel=FLUSHES_PER_PROJECT, max_batch=WRITE_BATCH
        )
        # A sleep's WaitStarted (the attempt's last write too) is one statement each batch
        # (leases.sleep_many): a burst of sleeps costs what a burst of completions does.
        self.sleeps: Batcher[str, leases.Sleep, RunState] = Batcher(
            self._flush_sleeps, parallel=FLUSHES_PER_PROJECT, max_batch=WRITE_BATCH
        )

    # Both flushes answer per write: a lost lease, or a value Postgres would refuse, is that
    # write's error. When the statement itself fails, the batcher flushes each write alone,
    # so an error only Postgres detects is still that write's own (awooop.core.batching).
    async def _flush_writes(
        self, project_id: str, writes: list[leases.FencedWrite]
    ) -> list[RunState | BaseException | None]:
        # On the run pool (platform role), as the claims: the fence (run id, worker, attempt,
        # live lease) already names the one row each write may touch, and no tenant to set saves
        # a round trip per batch. Batches stay per project.
        results = await self.statements.fenced_record_many(writes)
        return list(results)

    async def _flush_completions(
        self, _project_id: str, completions: list[leases.Completion]
    ) -> list[BaseException | None]:
        results = await self.statements.complete_many(completions)
        return list(results)

    async def _flush_sleeps(
        self, _project_id: str, sleeps: list[leases.Sleep]
    ) -> list[RunState | BaseException]:
        results = await self.statements.sleep_many(sleeps)
        return list(results)

    async def write(self, project_id: str, write: leases.FencedWrite) -> RunState | None:
        """A fenced write, batched with the other attempts' writes of the project (group
        commit): the run's new state, or None for journal events the one-statement journal
        wrote; raises E-RUN-002 when the attempt no longer holds its lease."""
        with unavailable_on_store_errors("a fenced write failed"):
            return await self.writes.submit(project_id, write, unique=write.run_id)

    async def sleep(self, project_id: str, sleep: leases.Sleep) -> RunState:
        """A sleep's ``WaitStarted``, batched with the other attempts' sleeps of the project:
        the run's new state; raises E-RUN-002 when the attempt no longer holds its lease."""
        with unavailable_on_store_errors("a fenced write failed"):
            return await self.sleeps.submit(project_id, sleep, unique=sleep.run_id)

    async def release(
        self,
        attempt: Attempt,
        reason: str = "the worker shut down",
        exc: BaseException | None = None,
    ) -> Outcome:
        """Give the lease back (``LeaseReleased``, uncharged: the run did nothing wrong): the
        attempt stops without an end. ``exc``: the exception that ended the attempt (its
        traceback and step are kept with the event)."""
        attempt.finishing = True
        traceback = "" if exc is None else failure_traceback(exc)
        step = None if exc is None else attempt.step_of(exc)
        return await self._last_write(
            attempt,
            Outcome.RELEASED,
            lambda _s, now: LeaseReleased(
                at=now,
                worker_id=self.worker_id,
                attempt=attempt.number,
                charged=False,
                reason=reason,
                traceback=traceback,
                step=step,
            ),
        )

    async def give_back(
        self, attempt: Attempt, why: str, exc: BaseException | None = None
    ) -> Outcome:
        """The attempt ended because the runtime's own stores were away or refusing: hand the
        run back uncharged as soon as Postgres takes the write, retried with a growing pause
        while the lease holds (the heartbeat goes on renewing it meanwhile). RELEASED, LOST
        when the lease went elsewhere, or ERROR once the lease can no longer be trusted (the
        reaper then takes the run as for a dead worker)."""
        pause = GIVE_BACK_FIRST_PAUSE_S
        reason = f"the attempt was abandoned: {why}"
        while True:
            outcome = await self.release(attempt, reason, exc)
            if outcome is not Outcome.ERROR:
                return outcome
            remaining = attempt.lease_deadline - time.monotonic()
            if attempt.stop_reason is not None or remaining <= 0:
                return Outcome.ERROR
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, GIVE_BACK_MAX_PAUSE_S)

    async def complete(self, attempt: Attempt, result: object) -> Outcome:
        attempt.finishing = True
        try:
            encoded, _ = journal("the run's result", result, None, self.result_max_bytes)
        except AwoooPError as exc:  # not storable as JSON, or too large: nothing recorded
            return await self.fail(attempt, exc)
        if attempt.parent_run_id is not None:  # a child: its parent's wait is decided with it
            return await self._last_write(
                attempt,
                Outcome.COMPLETED,
                lambda _s, now: RunCompleted(
                    at=now, worker_id=self.worker_id, attempt=attempt.number, result=encoded
                ),
            )
        completion = leases.Completion(
            attempt.run_id, self.worker_id, attempt.number, encoded, trace_metadata()
        )
        return await self._settle_write(
            attempt,
            Outcome.COMPLETED,
            self.completions.submit(attempt.project_id, completion, unique=attempt.run_id),
        )

    async def fail(self, attempt: Attempt, exc: BaseException) -> Outcome:
        attempt.finishing = True
        code, reason = failure_of(exc)
        step = attempt.step_of(exc)
        log.warning("handler_failed", code=code, reason=reason, step=step, exc_info=exc)
        traceback = failure_traceback(exc)
        return await self._last_write(
            attempt,
            Outcome.FAILED,
            lambda _s, now: RunFailed(
                at=now,
                reason=reason,
                code=code,
                worker_id=self.worker_id,
                attempt=attempt.number,
                traceback=traceback,
                step=step,
            ),
        )

    async def _last_write(
        self, attempt: Attempt, outcome: Outcome, make: Callable[[RunState, datetime], Event]
    ) -> Outcome:
        fenced = leases.FencedWrite(
            attempt.run_id, self.worker_id, attempt.number, make, trace_metadata()
        )
        return await self._settle_write(attempt, outcome, self._ending(attempt, outcome, fenced))

    def _ending(
        self, attempt: Attempt, outcome: Outcome, fenced: leases.FencedWrite
    ) -> Awaitable[RunState | None]:
        """The last write, alone when it ends a child run (:meth:`_alone`), else batched."""
        if attempt.parent_run_id is not None and outcome is not Outcome.RELEASED:
            return self._alone(fenced)
        return self.write(attempt.project_id, fenced)

    async def _alone(self, write: leases.FencedWrite) -> RunState | None:
        """A child run's end, in a transaction of its own (not a group commit): it locks the
        child's row, then its parent's (awooop.eventlog.child_waits), and a group commit holding
        other runs' rows, a parent's among them, could wait for another in a cycle."""
        with unavailable_on_store_errors("a fenced write failed"):
            [written] = await self.statements.fenced_record_many([write])
        if isinstance(written, BaseException):
            raise written
        return written

    async def _settle_write(
        self,
        attempt: Attempt,
        outcome: Outcome,
        written: Awaitable[object],
        *,
        last_resort: bool = False,
    ) -> Outcome:
        """Await the attempt's fenced last write and say what came of it (see the module
        docstring: a data error fails the run, a lost lease is LOST, the rest ERROR)."""
        try:
            await written
        except LeaseLostError as exc:
            log.info("last_write_fenced", outcome=str(outcome), reason=exc.message)
            return Outcome.LOST
        except Exception as exc:
            if data_error(exc) and outcome is Outcome.COMPLETED:
                # This run's return value, not the database: the run fails, with a reason
                # that names the value's place (and does not hold the value).
                return await self.fail(attempt, unstorable("the return value", exc))
            if data_error(exc) and outcome is Outcome.FAILED and not last_resort:
                return await self._fail_plainly(attempt, exc)
            log.exception("last_write_failed", outcome=str(outcome))
            return Outcome.ERROR
        if outcome in (Outcome.COMPLETED, Outcome.FAILED):
            metrics.RUNS_FINISHED.labels(outcome.name).inc()
        return outcome

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
            attempt, Outcome.FAILED, self._ending(attempt, Outcome.FAILED, fenced), last_resort=True
        )
