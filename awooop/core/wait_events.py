"""The run events of durable waits (``run.sleep``, ``run.wait_for_event``; docs/workers.md),
members of :data:`awooop.core.events.RunEvent` under the same evolution rules."""

from __future__ import annotations

import uuid
from datetime import datetime

from awooop.core.event_base import JSON, EventBase


class WaitStarted(EventBase, frozen=True, kw_only=True, tag=True):
    """The attempt ended in ``run.sleep`` (kind "sleep"), ``run.wait_for_event`` ("event") or
    ``run.wait_for_children`` ("children": ``children`` the child runs waited for, ``needed``
    how many of them must finish): WAITING_EVENT, the lease released; ``due_at`` (the sleep's,
    the wait's timeout) is journaled under ``step`` (awooop.eventlog.wait_state)."""

    worker_id: str
    attempt: int
    step: str
    kind: str
    due_at: datetime | None = None
    name: str | None = None
    match: JSON = None
    children: tuple[uuid.UUID, ...] = ()
    needed: int | None = None


class TimerFired(EventBase, frozen=True, kw_only=True, tag=True):
    """The wait ``step`` is due (a sleep ended, an event wait timed out): RESUMED."""

    step: str
    kind: str
    due_at: datetime


class SignalDelivered(EventBase, frozen=True, kw_only=True, tag=True):
    """A signal answered the run's event wait ``step``: RESUMED."""

    step: str
    name: str
    signal_id: uuid.UUID
    key: str
    payload: JSON = None
    sent_by: str = ""
