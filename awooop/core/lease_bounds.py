"""The time bounds a lease depends on (docs/workers.md, "Time bounds"), checked when the
settings load: a worker that cannot renew must stop its handlers before the database lets
anyone else take the runs."""

from __future__ import annotations

from typing import Protocol

from awooop.core.config_names import env_name
from awooop.core.errors import ConfigError

# Blocking stream reads (worker intake, projectors, revision notices) wait up to 1 s in Redis;
# the socket timeout must leave them room to answer.
LONGEST_REDIS_BLOCK_S = 1.0


class LeaseTimes(Protocol):
    """The settings the bounds read (awooop.core.config.Settings has them)."""

    @property
    def lease_ttl_s(self) -> float: ...
    @property
    def heartbeat_interval_s(self) -> float: ...
    @property
    def lease_safety_fraction(self) -> float: ...
    @property
    def run_lease_ttl_s(self) -> float: ...
    @property
    def redis_socket_timeout_s(self) -> float: ...
    @property
    def local_lease_s(self) -> float: ...
    @property
    def lease_io_timeout_s(self) -> float: ...


def check_lease_bounds(settings: LeaseTimes) -> None:
    """Raise ConfigError naming the first bound ``settings`` breaks."""
    if not 0 <= settings.lease_safety_fraction < 1:
        raise ConfigError(f"{env_name('lease_safety_fraction')} must be at least 0 and below 1")
    local_lease = settings.local_lease_s
    if settings.heartbeat_interval_s >= local_lease:
        raise ConfigError(
            f"{env_name('heartbeat_interval_s')} must be shorter than {env_name('lease_ttl_s')} "
            f"minus the safety margin ({local_lease:g} s): a lease must be renewed before the "
            "worker's own deadline"
        )
    if settings.run_lease_ttl_s and settings.run_lease_ttl_s < 2 * settings.lease_ttl_s:
        raise ConfigError(
            f"{env_name('run_lease_ttl_s')} must be 0 (ten times {env_name('lease_ttl_s')}) or "
            f"at least twice {env_name('lease_ttl_s')}: a run's own lease is renewed when half "
            "of it is gone, and must outlast the session's between two renewals"
        )
    if settings.lease_io_timeout_s < 0:
        raise ConfigError(f"{env_name('db_statement_timeout_s')} must be 0 (automatic) or more")
    if settings.lease_io_timeout_s >= local_lease:
        raise ConfigError(
            f"{env_name('db_statement_timeout_s')} must be shorter than "
            f"{env_name('lease_ttl_s')} minus the safety margin ({local_lease:g} s): a "
            "renewal that hangs must fail while the lease still holds"
        )
    if settings.redis_socket_timeout_s <= LONGEST_REDIS_BLOCK_S:
        raise ConfigError(
            f"{env_name('redis_socket_timeout_s')} must be longer than the "
            f"{LONGEST_REDIS_BLOCK_S:g} s that blocking stream reads wait"
        )
