"""The pure decisions of leadership by lease (awooop/core/leadership.py) and their settings."""

from __future__ import annotations

import time

import pytest

from awooop.core.config import load_settings
from awooop.core.errors import ConfigError, LeadershipLostError
from awooop.core.leadership import (
    MARGIN_FRACTION,
    Lease,
    check_timings,
    local_deadline,
    stalled,
    timeout_ms,
)


def test_the_local_deadline_ends_before_the_lease_counted_from_before_the_renewal() -> None:
    # The renewal statement started at t=100 (monotonic); Postgres counts the lease from its
    # own now(), which is later, so stopping before 100 + lease is always on the safe side.
    deadline = local_deadline(100.0, 8.0)
    assert 100.0 < deadline < 108.0
    assert deadline == pytest.approx(108.0 - 8.0 * MARGIN_FRACTION)


@pytest.mark.parametrize(
    ("lease_s", "renew_s", "ok"),
    [(8.0, 2.0, True), (8.0, 3.2, True), (8.0, 3.3, False), (1.5, 0.3, True), (8.0, 0, False)],
)
def test_a_renewal_may_fail_once_and_the_next_still_lands_in_time(
    lease_s: float, renew_s: float, ok: bool
) -> None:
    assert (check_timings(lease_s, renew_s) is None) is ok


def test_timeouts_are_whole_milliseconds_never_zero() -> None:
    assert timeout_ms(8.0) == "8000"
    assert timeout_ms(0.0001) == "1"  # 0 would mean "no timeout" to Postgres


def test_the_default_relay_lease_replaces_a_frozen_leader_within_ten_seconds() -> None:
    """R-19: a standby leads at most lease + poll interval after the leader froze."""
    settings = load_settings(environ={})
    assert settings.relay_leader_lease_s + settings.relay_poll_interval_s <= 10.0
    assert check_timings(settings.relay_leader_lease_s, settings.relay_leader_renew_s) is None


def test_a_renewal_interval_too_long_for_the_lease_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"AWOOOP_RELAY_LEADER_LEASE_S.*RENEW_S"):
        load_settings(
            environ={"AWOOOP_RELAY_LEADER_LEASE_S": "4", "AWOOOP_RELAY_LEADER_RENEW_S": "3"}
        )


@pytest.mark.parametrize(
    ("now", "stall_s", "gives_up"),
    [(129.9, 30.0, False), (130.0, 30.0, True), (500.0, None, False)],
)
def test_a_holder_gives_the_lease_back_once_no_work_finished_for_the_stall_bound(
    now: float, stall_s: float | None, gives_up: bool
) -> None:
    assert stalled(now, 100.0, stall_s) is gives_up


def test_the_default_stall_bound_replaces_a_stuck_relay_within_forty_seconds() -> None:
    """A leader stuck in a call gives the lease back within stall + renewal interval; a
    standby leads one poll interval later."""
    s = load_settings(environ={})
    assert s.relay_stall_s + s.relay_leader_renew_s + s.relay_poll_interval_s <= 40.0
    assert s.relay_stall_s >= s.redis_socket_timeout_s + s.relay_leader_lease_s


def test_a_stall_bound_a_slow_but_working_step_could_reach_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"AWOOOP_RELAY_STALL_S must be at least .* \(18 s\)"):
        load_settings(environ={"AWOOOP_RELAY_STALL_S": "17"})
    assert load_settings(environ={"AWOOOP_RELAY_STALL_S": "18"}).relay_stall_s == 18.0


def test_a_term_past_its_local_deadline_is_lost_by_the_clock_before_the_renewer_says_so() -> None:
    called: list[int] = []
    lease = Lease(
        database_url="postgresql://unused",
        name="relay",
        holder="h",
        lease_s=10.0,
        renew_s=2.0,
        on_lost=lambda: called.append(1),
    )
    lease.deadline = time.monotonic() - 1.0
    assert lease.lost() is None  # no term held: nothing to lose
    lease.term = 3
    lease.deadline = time.monotonic() + 60.0
    assert lease.lost() is None and lease.held
    lease.deadline = time.monotonic() - 0.001  # stood still past it; the renewer had no turn
    reason = lease.lost()
    assert reason is not None and "ran out" in reason, reason
    assert not lease.held and called == [1]
    assert lease.lost() == reason and called == [1]  # said once
    with pytest.raises(LeadershipLostError, match="ran out"):
        lease.check()
