from __future__ import annotations

import pytest

from awooop.commands.worker import pool_size, worker_connections
from awooop.core.config import load_settings
from awooop.core.errors import ConfigError


def test_defaults_point_at_the_local_services() -> None:
    settings = load_settings(environ={})
    assert settings.database_url == "postgresql://postgres@127.0.0.1:5432/awooop"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.heartbeat_interval_s < settings.lease_ttl_s


def test_default_lease_figures_recover_a_crashed_run_within_a_minute() -> None:
    """R-11..R-13, R-17: a 5 min lease (R-11's figure) cannot meet R-17's "recovered within 1
    minute"; the defaults (docs/workers.md, Defaults) recover within lease TTL + one reclaim
    interval, and a live worker may miss several heartbeats before it loses a lease."""
    settings = load_settings(environ={})
    assert (settings.lease_ttl_s, settings.heartbeat_interval_s) == (30.0, 5.0)
    assert (settings.reaper_interval_s, settings.reclaim_interval_s) == (10.0, 10.0)
    assert settings.lease_ttl_s + settings.reclaim_interval_s <= 60
    assert settings.lease_ttl_s >= 4 * settings.heartbeat_interval_s


def test_values_come_from_the_environment() -> None:
    settings = load_settings(
        environ={
            "AWOOOP_LEASE_TTL_S": "12.5",
            "AWOOOP_SHARD_COUNT": "8",
            "LOOP_PROJECT_ID": "legacy",
        }
    )
    assert (settings.lease_ttl_s, settings.shard_count, settings.loop_project_id) == (
        12.5,
        8,
        "legacy",
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AWOOOP_DATABASE_URL": "not a url"}, "AWOOOP_DATABASE_URL"),
        ({"AWOOOP_DATABASE_URL": "mysql://h/db"}, "AWOOOP_DATABASE_URL"),
        ({"AWOOOP_REDIS_URL": "redis://host:notaport/0"}, "AWOOOP_REDIS_URL"),
        ({"AWOOOP_LEASE_TTL_S": "-5"}, "AWOOOP_LEASE_TTL_S"),
        ({"AWOOOP_LEASE_TTL_S": "soon"}, "AWOOOP_LEASE_TTL_S"),
        ({"AWOOOP_SHARD_COUNT": "0"}, "AWOOOP_SHARD_COUNT"),
        ({"AWOOOP_HEARTBEAT_INTERVAL_S": "60"}, "AWOOOP_HEARTBEAT_INTERVAL_S"),
        ({"AWOOOP_HTTP_PORT": "70000"}, "AWOOOP_HTTP_PORT"),
        ({"AWOOOP_DB_POOL_SIZE": "-1"}, "AWOOOP_DB_POOL_SIZE"),
        ({"AWOOOP_DATABASE_URL": "postgresql://u@h1:5432,h2:x/db"}, "AWOOOP_DATABASE_URL"),
        ({"AWOOOP_DATABASE_URL": "postgresql://h1:5432,/db"}, "AWOOOP_DATABASE_URL"),
        ({"AWOOOP_REDIS_URL": "redis://h1:6379,h2:6379/0"}, "AWOOOP_REDIS_URL"),
    ],
)
def test_bad_configuration_names_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ=env)
    assert named in info.value.message
    assert info.value.code == "E-CONFIG-001"


def test_time_bounds_of_a_lease_follow_the_lease_by_default() -> None:
    """R-18: the local lease ends a safety margin before the database's, and a hung Postgres
    wait fails while it still holds: twice over with the defaults."""
    settings = load_settings(environ={})
    assert settings.lease_safety_margin_s == pytest.approx(3.0)
    assert settings.local_lease_s == pytest.approx(27.0)
    assert settings.lease_io_timeout_s == pytest.approx(9.0)
    short = load_settings(environ={"AWOOOP_LEASE_TTL_S": "2", "AWOOOP_HEARTBEAT_INTERVAL_S": "0.5"})
    assert short.lease_io_timeout_s == pytest.approx(0.6)
    explicit = load_settings(environ={"AWOOOP_DB_STATEMENT_TIMEOUT_S": "4"})
    assert explicit.lease_io_timeout_s == 4.0


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AWOOOP_DB_STATEMENT_TIMEOUT_S": "27"}, "AWOOOP_DB_STATEMENT_TIMEOUT_S"),
        ({"AWOOOP_DB_STATEMENT_TIMEOUT_S": "-1"}, "AWOOOP_DB_STATEMENT_TIMEOUT_S"),
        ({"AWOOOP_LEASE_SAFETY_FRACTION": "1"}, "AWOOOP_LEASE_SAFETY_FRACTION"),
        (
            {"AWOOOP_LEASE_SAFETY_FRACTION": "0.5", "AWOOOP_HEARTBEAT_INTERVAL_S": "15"},
            "AWOOOP_HEARTBEAT_INTERVAL_S",
        ),
        ({"AWOOOP_REDIS_SOCKET_TIMEOUT_S": "0.5"}, "AWOOOP_REDIS_SOCKET_TIMEOUT_S"),
    ],
)
def test_time_bounds_longer_than_the_lease_are_refused(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(environ=env)


def test_a_workers_pools_come_from_its_concurrency_unless_set() -> None:
    assert [pool_size(c) for c in (1, 8, 16, 100)] == [2, 3, 5, 10]
    assert pool_size(16, configured=1) == 1
    auto = load_settings(environ={})
    assert worker_connections(auto, 16) == 3 * 5 + 1 + 2  # three pools, LISTEN, pointer checks
    set_ = load_settings(environ={"AWOOOP_DB_POOL_SIZE": "1"})
    assert worker_connections(set_, 16) == 3 * 1 + 1 + 2


def test_a_database_url_may_name_a_primary_and_its_standbys() -> None:
    """libpq's and asyncpg's multi-host form: connect to whichever host is read-write."""
    url = "postgresql://app:pw@10.0.0.1:5432,10.0.0.2:5433/awooop?target_session_attrs=read-write"
    assert load_settings(environ={"AWOOOP_DATABASE_URL": url}).database_url == url
