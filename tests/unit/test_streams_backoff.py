"""Retry pacing and rate-limited logging for stream clients (pure)."""

from __future__ import annotations

import pytest

from awooop.streams.backoff import RateLimiter, retry_delay


def no_jitter(low: float, high: float) -> float:
    return high


def test_retry_delay_doubles_from_the_base_and_stops_at_the_cap() -> None:
    delays = [retry_delay(n, base_s=0.05, cap_s=1.0, jitter=no_jitter) for n in range(0, 8)]
    assert delays == [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_retry_delay_jitter_only_shortens() -> None:
    assert retry_delay(3, base_s=0.1, jitter=lambda low, high: low) == pytest.approx(0.32)


def test_rate_limiter_allows_one_event_per_interval_and_counts_the_rest() -> None:
    now = [100.0]
    limiter = RateLimiter(interval_s=10.0, clock=lambda: now[0])
    assert limiter.allow("nogroup") == 0
    assert limiter.allow("nogroup") is None
    assert limiter.allow("other") == 0  # keys are independent
    now[0] += 5
    assert limiter.allow("nogroup") is None
    now[0] += 5
    assert limiter.allow("nogroup") == 2  # two were suppressed since the last one
    assert limiter.allow("nogroup") is None
