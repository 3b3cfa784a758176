"""How a kit attempt that raised ends, as the worker ends it (:mod:`awooop.worker.outcomes`)."""

from __future__ import annotations

from datetime import datetime

from awooop.core.events import LeaseReleased, RunFailed
from awooop.core.excerpts import failure_traceback
from awooop.worker.attempts import Attempt
from awooop.worker.outcomes import failure_of, infrastructure_failure


def failed(
    worker_id: str, attempt: Attempt, exc: Exception, at: datetime
) -> LeaseReleased | RunFailed:
    """The attempt's last event: handed back uncharged when the runtime's stores were away
    (``LeaseReleased``), else ``RunFailed`` with the error's code, traceback and step."""
    code, reason = failure_of(exc)
    traceback, step = failure_traceback(exc), attempt.step_of(exc)
    if infrastructure_failure(exc):
        return LeaseReleased(
            at=at,
            worker_id=worker_id,
            attempt=attempt.number,
            charged=False,
            reason=reason,
            traceback=traceback,
            step=step,
        )
    return RunFailed(
        at=at,
        reason=reason,
        code=code,
        worker_id=worker_id,
        attempt=attempt.number,
        traceback=traceback,
        step=step,
    )
