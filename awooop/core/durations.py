"""How long something took or has taken, as people say it."""

from __future__ import annotations

from datetime import datetime


def elapsed(now: datetime, then: datetime) -> str:
    """Pure: how long from ``then`` to ``now``, as people say it: 45 s, 31 min, 2 h 5 min."""
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
