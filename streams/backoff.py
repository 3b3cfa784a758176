"""Pure pacing decisions for stream clients: retry backoff and rate-limited logging.

Redis errors (connection refused while Redis restarts, NOGROUP after it lost its data) tend to
repeat for every call until the cause goes away. A client that retried at once and logged each
failure would spin the CPU and flood the logs; these two helpers keep both bounded.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def retry_delay(
    failures: int,
    *,
    base_s: float = 0.05,
    cap_s: float = 5.0,
    jitter: Callable[[float, float], float] = random.uniform,
) -> float:
    """The pause after ``failures`` consecutive failures: exponential from ``base_s``, capped
    at ``cap_s``, with 20 % jitter downwards so that many clients do not retry in step."""
    if failures <= 0:
        return 0.0
    delay = min(cap_s, base_s * 2.0 ** (failures - 1))
    return delay * jitter(0.8, 1.0)


@dataclass
class RateLimiter:
    """Allows one event per ``interval_s`` per key and counts the ones it suppressed.

    ``allow(key)`` returns ``None`` while the key is quiet, else the number of events
    suppressed since the last allowed one (0 for the first), for the log line to report.
    """

    interval_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _last: dict[str, float] = field(default_factory=dict)
    _suppressed: dict[str, int] = field(default_factory=dict)

    def allow(self, key: str) -> int | None:
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._suppressed.pop(key, 0)
