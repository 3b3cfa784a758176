"""How an attempt ends: the outcomes, and the pure decisions that pick one.

| handler ends with            | written            | outcome          |
|------------------------------|--------------------|------------------|
| a return value               | ``RunCompleted``   | COMPLETED        |
| an exception                 | ``RunFailed``      | FAILED           |
| Postgres/Redis unavailable   | ``LeaseReleased``  | RELEASED (ERROR) |
| ``wait_for_approval``        | (already written)  | WAITING_APPROVAL |
| ``sleep``, ``wait_for_event``| (already written)  | WAITING_EVENT    |
| cancelled: lease lost        | nothing            | LOST             |
| cancelled: run cancelled     | nothing            | CANCELLED        |
| cancelled: shutdown          | ``LeaseReleased``  | RELEASED         |

Both ``LeaseReleased`` are uncharged (``charged=False``: the run did nothing wrong, its
``max_attempts`` moves up with the attempt). An attempt abandoned because the runtime's own
stores were away or refusing is handed back once Postgres takes the write (retried while the
lease holds, :meth:`awooop.worker.last_writes.LastWrites.give_back`); only when the lease ran
out first is it ERROR, and the reaper then takes the run as for a dead worker.

A refused (fenced) last write is LOST: another attempt or an operator owns the run now. The
database being unavailable for the last write (a connection-level error) is ERROR: nothing is
acknowledged, the lease runs out, the reaper or a reclaimer takes the run again. Only ERROR
leaves the stream message pending.

The runtime's own stores being unavailable for a moment (a Postgres restart under a journal
write, the pointer check before a model call: ``DatabaseUnavailableError``,
``RedisUnavailableError``) is not the run's failure: the attempt is handed back uncharged, as
above. Failing it would depend on whether Postgres was back in time for the ``RunFailed``.
"""

from __future__ import annotations

import enum

from opentelemetry import trace
from opentelemetry.context import Context

from awooop.core import metrics
from awooop.core.errors import (
    AwoooPError,
    DatabaseUnavailableError,
    HandlerError,
    RedisUnavailableError,
)
from awooop.core.excerpts import redacted
from awooop.core.logs import get_logger
from awooop.core.storable import sanitized
from awooop.worker.attempts import Attempt, StopReason

log = get_logger("awooop.worker")

MAX_REASON_CHARS = 2000


class Outcome(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    WAITING_APPROVAL = "waiting_approval"
    WAITING_EVENT = "waiting_event"
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


def local_deadline_passed(attempt: Attempt) -> None:
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
    storable whatever the exception says (NUL and lone surrogates escaped), and what looks
    like a secret in it is redacted, as in the traceback kept with it
    (:mod:`awooop.core.excerpts`)."""
    code = exc.code if isinstance(exc, AwoooPError) else HandlerError.code
    text = str(exc)
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return code, sanitized(redacted(reason)[:MAX_REASON_CHARS])
