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

The fair share between projects rings it too, with a debt: a claim that deferred its run (a run
of another project is ahead in the fair order) leaves the worker one turn to take from the
polling path, at any age (``owe``). While turns are owed, polling takes runs of every age in the
fair order, as many as free slots, and looks again whenever a slot frees; each run it takes pays
one turn, and a poll that had room and found nothing clears them. So a deferral always becomes
one start, without waiting for the poll interval, and a run created during a long contended
stretch is not held back by the age bound of a drain.
"""

from __future__ import annotations

import asyncio
import time


class ResumeBell:
    def __init__(self) -> None:
        self.rung = asyncio.Event()
        self._since: float | None = None
        self.owed = 0  # polling turns owed to deferred claims (the fair share)

    def owe(self) -> None:
        """A claim deferred its run: polling owes one start in the fair order, now."""
        self.owed += 1
        self.rung.set()

    def ring(self) -> None:
        if self._since is None:
            self._since = time.monotonic()
        self.rung.set()

    def min_age(self, normal: float, now: float | None = None) -> float:
        """The polling path's minimum wait: ``normal``, or less while a drain is on (none while
        turns are owed)."""
        if self.owed:
            return 0.0
        if self._since is None:
            return normal
        elapsed = (time.monotonic() if now is None else now) - self._since
        return max(0.0, min(normal, elapsed))

    def polled(self, claimed: int, had_room: bool) -> None:
        """After a poll: each run taken pays an owed turn; a poll that had room and found
        nothing ends the drain and clears the turns."""
        self.owed = max(0, self.owed - claimed)
        if claimed == 0 and had_room:
            self._since = None
            self.owed = 0

    @property
    def draining(self) -> bool:
        return self._since is not None or self.owed > 0
