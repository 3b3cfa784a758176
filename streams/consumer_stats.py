"""What a consumer counts (read by tests, tools and the worker's idle check)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ConsumerStats:
    handled: int = 0  # handler calls
    acked: int = 0
    handler_errors: int = 0
    read_errors: int = 0
    nogroup: int = 0  # NOGROUP answers (each one recreated the group after a pause)
    resets: int = 0  # epoch changes seen
    dead_lettered: int = 0
