"""Short timings for tests that watch leases expire, heartbeats renew and loops come round: the
``fast`` fixture (tests/conftest.py) is ``settings`` with one of these variants applied; a
module picks its variant with ``pytestmark = pytest.mark.fast("name")`` (default: ``worker``)."""

from __future__ import annotations

from typing import Any

import msgspec

from awooop.core.config import Settings

FAST: dict[str, dict[str, Any]] = {
    # A worker in the test's process: a 2 s lease renewed every 0.2 s, reaper and poll quick
    # (the statement bound, a third of the local lease, is 0.6 s: a busy disk does not trip it).
    "worker": {
        "lease_ttl_s": 2.0,
        "heartbeat_interval_s": 0.2,
        "reaper_interval_s": 0.2,
        "poll_interval_s": 0.2,
        "shutdown_grace_s": 0.3,
    },
    # The stream delivery path alone: the polling path kept out (60 s), two shards, and a
    # message dead-lettered at its third delivery.
    "streams": {
        "lease_ttl_s": 1.0,
        "heartbeat_interval_s": 0.1,
        "reclaim_interval_s": 0.2,
        "poll_interval_s": 60.0,
        "max_deliveries": 3,
        "shard_count": 2,
    },
    # Worker processes (`awooop worker`): a 2 s lease, the recovery loops every second, their
    # logs at info for the test to read.
    "processes": {
        "lease_ttl_s": 2.0,
        "heartbeat_interval_s": 0.4,
        "reaper_interval_s": 1.0,
        "reclaim_interval_s": 1.0,
        "poll_interval_s": 1.0,
        "shutdown_grace_s": 0.5,
        "log_level": "info",
    },
    # Worker processes that crash on a poison run: the recovery loops every 0.5 s, so each
    # crash's redelivery comes quickly; the stats sampled every second.
    "poison": {
        "stats_interval_s": 1.0,
        "lease_ttl_s": 2.0,
        "heartbeat_interval_s": 0.5,
        "reaper_interval_s": 0.5,
        "reclaim_interval_s": 0.5,
        "poll_interval_s": 0.5,
        "shutdown_grace_s": 0.5,
        "log_level": "info",
    },
}


def fast(settings: Settings, variant: str = "worker") -> Settings:
    return msgspec.structs.replace(settings, **FAST[variant])
