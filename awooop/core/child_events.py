"""The run event of child runs' fan-in (``run.wait_for_children``; docs/workers.md, Child runs),
a member of :data:`awooop.core.events.RunEvent` under the same evolution rules. The wait itself
starts with ``WaitStarted`` (kind "children") and times out with ``TimerFired``."""

from __future__ import annotations

from awooop.core.event_base import JSON, EventBase


class ChildrenFinished(EventBase, frozen=True, kw_only=True, tag=True):
    """Enough of the child runs that the wait ``step`` waits for have finished: RESUMED.
    ``results``: each child's outcome (run id, key, status, result or failure), in the order
    the handler gave, as it was when the wait ended; journaled under ``step``
    (awooop.eventlog.wait_state)."""

    step: str
    results: JSON = None
    finished: int = 0  # how many of them had finished
