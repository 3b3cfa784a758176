"""When the relay loop runs next: NOTIFY from the events' trigger, linger, and re-checks.

A statement-level trigger NOTIFYs ``awooop_relay`` on insert; the relay LISTENs on its
connection and polls every ``AWOOOP_RELAY_POLL_INTERVAL_S`` as a fallback. A statement that
wrote a dispatch event (``DISPATCH_EVENT_TYPES``: a worker waits for it) wakes the relay at
once, unless it and, on a moving average (``GAP_WEIGHT``), the notices before it came less
than ``AWOOOP_RELAY_DISPATCH_WINDOW_S`` (default 5 ms, 0: always at once) after the previous
one: commits are then coming faster than one a window, and the relay waits one window, so that
the dispatch events of that window share one read, one script call and, downstream, one worker
read, claim and completion; a commit after a quieter spell (every commit at 100 runs/s, and a
few that caught up with each other after a late wake-up) is read at once. One that wrote only
other events (claims, steps, completions: for projectors) waits up to
``AWOOOP_RELAY_LINGER_S`` (default 20 ms, 0: at once), so that the events of a short run, or
the next dispatch event's wake-up, share one read and one script call. When committed rows are
held back by an older running transaction (anywhere in the cluster: ``read_forward``
waits for the snapshot's xmin) it re-checks after 1 ms, doubling up to 50 ms.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

NOTIFY_CHANNEL = "awooop_relay"
NOTICES_TABLE = "awooop_contract_outbox"
# Payloads of the events' NOTIFY (migration 0071): a statement that wrote a dispatch event, and
# one that wrote only other events (published after AWOOOP_RELAY_LINGER_S at most).
DISPATCH_PAYLOAD = "awooop_events:dispatch"
EVENTS_PAYLOAD = "awooop_events"
# Held back by an older running transaction: re-check after 1 ms, doubling up to 4 ms for the
# first second (most holders are short worker transactions that write no event, so no NOTIFY
# announces their end), then up to 50 ms (a long transaction: do not spin on it).
MIN_RECHECK_S = 0.001
SHORT_HOLD_RECHECK_S = 0.004
SHORT_HOLD_S = 1.0
MAX_RECHECK_S = 0.05
# The dispatch rate is judged by a moving average of the gaps between dispatch notices (each gap
# counted at most GAP_CAP windows, so that a quiet spell or a stall weighs as a few slow
# commits, not as a lost cause): a window opens when the average and the last gap are both
# under the window. One long gap in a steady stream moves the average a little, where it
# reset a count of short gaps in a row and left a busy pipeline unbatched; a paced producer's
# catch-up after a stall (its commits already late) is read at once for its first few.
GAP_WEIGHT = 0.25
GAP_CAP = 4.0


class Wakeup:
    """Sets the loop's wake-up event for NOTIFYs, the lease renewer and held-back rows."""

    def __init__(
        self,
        *,
        linger_s: float,
        poll_interval_s: float,
        on_notices: Callable[[], None],
        dispatch_window_s: float = 0.0,
    ) -> None:
        self.linger_s = linger_s
        self.poll_interval_s = poll_interval_s
        self.dispatch_window_s = dispatch_window_s
        self.on_notices = on_notices  # a NOTIFY for the contract outbox: deliver notices now
        self.event: asyncio.Event | None = None  # the loop's, known from its first step
        self._recheck: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._window: asyncio.TimerHandle | None = None
        self._last_dispatch = -float("inf")  # monotonic time of the last dispatch notice
        self._gap_average = GAP_CAP * dispatch_window_s  # as after a quiet spell
        self._recheck_delay = MIN_RECHECK_S
        self._held_since: float | None = None  # when the current hold-back began

    def set(self) -> None:
        if self.event is not None:
            self.event.set()

    def on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        """The LISTEN callback on the leader's connection."""
        if payload == NOTICES_TABLE:
            self.on_notices()
        if self.event is None:
            return
        busy = False
        if payload == DISPATCH_PAYLOAD:
            now = time.monotonic()
            gap = min(now - self._last_dispatch, GAP_CAP * self.dispatch_window_s)
            self._gap_average += GAP_WEIGHT * (gap - self._gap_average)
            busy = gap < self.dispatch_window_s and self._gap_average < self.dispatch_window_s
            self._last_dispatch = now
        if self.event.is_set():
            return  # a read is due anyway: it takes what this notice announced
        if payload == EVENTS_PAYLOAD and self.linger_s > 0:
            # Only events no worker waits for: let the next ones of the run join them.
            if self._linger is None:
                self._linger = asyncio.get_running_loop().call_later(
                    self.linger_s, self._end_timers
                )
            return
        if not busy:
            self.event.set()
        elif self._window is None:
            # Commits are coming fast: the ones of the next window share the read.
            self._window = asyncio.get_running_loop().call_later(
                self.dispatch_window_s, self._end_timers
            )

    def _end_timers(self) -> None:
        self._cancel_timers()
        self.set()

    def _cancel_timers(self) -> None:
        for timer in (self._linger, self._window):
            if timer is not None:
                timer.cancel()
        self._linger = self._window = None

    def read_started(self) -> None:
        """A read starts: it takes what the waiting notices announced."""
        self._cancel_timers()

    def caught_up(self) -> None:
        """Nothing is held back: the next hold-back starts re-checking at the shortest delay."""
        self._recheck_delay = MIN_RECHECK_S
        self._held_since = None

    def held_back(self) -> None:
        """Committed rows wait behind an older transaction, which no NOTIFY announces the end
        of: re-check soon, backing off while the hold lasts."""
        if self._recheck is not None:
            return
        now = time.monotonic()
        if self._held_since is None:
            self._held_since = now
        cap = SHORT_HOLD_RECHECK_S if now - self._held_since < SHORT_HOLD_S else MAX_RECHECK_S
        delay = min(self._recheck_delay, cap)
        self._recheck_delay = min(delay * 2, cap, self.poll_interval_s)
        self._recheck = asyncio.get_running_loop().call_later(delay, self._fire_recheck)

    def _fire_recheck(self) -> None:
        self._recheck = None
        self.set()

    def cancel(self) -> None:
        """The relay steps down: no timer outlives its leadership."""
        self._cancel_timers()
        if self._recheck is not None:
            self._recheck.cancel()
        self._recheck = None
