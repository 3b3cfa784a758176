"""The resume doorbell: a resumed pause (:mod:`awooop.runs.pauses`) makes the polling path look
at once, and keeps it looking while it finds runs that waited since the resume.

The runs a pause held back are PENDING in Postgres with their messages acknowledged; polling
is the path that takes them (``run_lock_dispatchable.sql``: oldest first, as many as the worker
has free slots). Polling normally takes only runs that waited a whole poll interval (or ten,
while the stream intake is busy), so that it does not race the stream for fresh runs. After a
notice the bound is the time since the ring: every run not touched since the resume is fair
game, nothing newer. The drain ends with the first poll that had room and found nothing.

A notice is a doorbell, never an order (any login may ``pg_notify``): a false ring costs one
poll, which claims only what Postgres says is claimable.
"""

from __future__ import annotations

import asyncio
import time


class ResumeBell:
    def __init__(self) -> None:
        self.rung = asyncio.Event()
        self._since: float | None = None

    def ring(self) -> None:
        if self._since is None:
            self._since = time.monotonic()
        self.rung.set()

    def min_age(self, normal: float, now: float | None = None) -> float:
        """The polling path's minimum wait: ``normal``, or less while a drain is on."""
        if self._since is None:
            return normal
        elapsed = (time.monotonic() if now is None else now) - self._since
        return max(0.0, min(normal, elapsed))

    def polled(self, claimed: int, had_room: bool) -> None:
        """After a poll: a poll that had room and found nothing ends the drain."""
        if claimed == 0 and had_room:
            self._since = None

    @property
    def draining(self) -> bool:
        return self._since is not None
