"""Replay progress: a bar with events/s and an ETA on a terminal, plain log lines otherwise.

The arithmetic and formatting are pure functions (unit-tested); :class:`Progress` only decides
when to draw.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from awooop.core.logs import get_logger

log = get_logger(__name__)

BAR_WIDTH = 24
LOG_EVERY_S = 5.0
DRAW_EVERY_S = 0.2


def rate(done: int, elapsed_s: float) -> float:
    return done / elapsed_s if elapsed_s > 0 else 0.0


def eta_s(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the average rate so far (None before anything is known)."""
    r = rate(done, elapsed_s)
    if r <= 0 or total <= 0:
        return None
    return max(0.0, (total - done) / r)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = round(seconds)
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def format_bar(label: str, done: int, total: int, elapsed_s: float) -> str:
    fraction = min(1.0, done / total) if total > 0 else 1.0
    filled = round(fraction * BAR_WIDTH)
    bar = "█" * filled + "░" * (BAR_WIDTH - filled)
    return (
        f"{label} {bar} {fraction:4.0%} {done:,}/{total:,} events "
        f"{rate(done, elapsed_s):,.0f} ev/s ETA {format_duration(eta_s(done, total, elapsed_s))}"
    )


class Progress:
    """Counts events of one phase; draws a bar on a TTY, logs a line every few seconds else."""

    def __init__(
        self,
        label: str,
        total: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.clock = clock
        self.started = clock()
        self._last = self.started

    def advance(self, n: int) -> None:
        self.done += n
        now = self.clock()
        if now - self._last >= (DRAW_EVERY_S if self.tty else LOG_EVERY_S):
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = now - self.started
        if self.tty:
            self.stream.write("\r" + format_bar(self.label, self.done, self.total, elapsed))
            self.stream.flush()
        else:
            log.info(
                "replay_progress",
                phase=self.label,
                events=self.done,
                total=self.total,
                events_per_s=round(rate(self.done, elapsed)),
                eta_s=eta_s(self.done, self.total, elapsed),
            )

    def finish(self) -> float:
        """End the phase; return its duration in seconds."""
        now = self.clock()
        elapsed = now - self.started
        if self.tty:
            self.stream.write(
                "\r" + format_bar(self.label, self.done, max(self.total, self.done), elapsed) + "\n"
            )
            self.stream.flush()
        else:
            log.info(
                "replay_phase_done",
                phase=self.label,
                events=self.done,
                seconds=round(elapsed, 3),
                events_per_s=round(rate(self.done, elapsed)),
            )
        return elapsed
