"""A run's failed attempts, read from its event stream: what the run page's failure block and
``awooop runs show`` list under "Failures".

An attempt that ends with its handler's exception writes the traceback and the step the
handler was in (:class:`awooop.core.events.RunFailed`), or, when the runtime's own stores were
away and the run goes to another attempt, the same on :class:`~awooop.core.events.LeaseReleased`.
Both are folded here from the run's events with a pure function, from the read that
:func:`awooop.projections.model_calls.history_from_log` already makes; a failure of the platform (a
dead letter, an expired lease) is listed too, without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from awooop.core.events import LeaseReleased, RunFailed
from awooop.eventlog import eventlog
from awooop.eventlog.state import RunState, RunStatus

EVENT_TYPES = frozenset({"RunFailed", "LeaseReleased"})


class FailureLine(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt's end with an error. ``retried``: the run went to another attempt
    (``LeaseReleased``); False: the run failed (``RunFailed``). ``step``: the step the handler
    was in when it raised (None: outside every step, or not a handler's exception);
    ``traceback`` empty when none was recorded."""

    version: int
    at: datetime
    event_type: str
    attempt: int | None
    worker_id: str | None
    code: str | None
    reason: str
    step: str | None
    traceback: str
    retried: bool


def failures(recorded: Sequence[eventlog.RecordedEvent]) -> list[FailureLine]:
    """Pure: the failures among one run's events (oldest first): every ``RunFailed``, and every
    ``LeaseReleased`` that kept an exception's traceback (a release at shutdown has none)."""
    lines = []
    for r in recorded:
        if r.event_type not in EVENT_TYPES:
            continue
        event = r.decode()
        if isinstance(event, RunFailed):
            code: str | None = event.code
            retried = False
        elif isinstance(event, LeaseReleased) and event.traceback:
            code, retried = None, True
        else:
            continue
        lines.append(
            FailureLine(
                version=r.version,
                at=event.at,
                event_type=r.event_type,
                attempt=event.attempt,
                worker_id=event.worker_id,
                code=code,
                reason=event.reason,
                step=event.step,
                traceback=event.traceback,
                retried=retried,
            )
        )
    return lines


def failed_by(state: RunState, lines: Sequence[FailureLine]) -> FailureLine | None:
    """Pure: the ``RunFailed`` that failed the run as it stands: its last one, when the run
    is FAILED with that failure's code and reason (a run failed otherwise, by an approval
    rejected or expired, or not failed now, has none)."""
    if state.status is not RunStatus.FAILED:
        return None
    failed = [f for f in lines if not f.retried]
    if not failed:
        return None
    last = failed[-1]
    if (last.code, last.reason) != (state.failure_code, state.failure_reason):
        return None
    return last
