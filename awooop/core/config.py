"""Runtime configuration: one Struct, loaded from environment variables, validated at start.

Every field maps to ``AWOOOP_<FIELD_NAME_UPPER>`` (except ``loop_project_id``, read from
``LOOP_PROJECT_ID`` as R-40 names it). An invalid value raises :class:`ConfigError` naming the
variable and the expected form. docs/reference.md, Settings, lists each variable.

Why the lease defaults are shorter than R-11 to R-13's (5 min lease, 30 s heartbeat, 1 min
reaper): R-17 asks for recovery within one minute of a crash. Heartbeats are batched (a
worker renews one session row for all its leases), so a short lease is cheap: lease 30 s,
heartbeat 5 s (a worker must miss six in a row to lose it), reaper and reclaim every 10 s: recovery
within lease TTL + one reclaim interval = 40 s. The relay's leader lease (8 s, renewed every
2 s, room for one failed renewal: :func:`awooop.core.leadership.check_timings`) is short
because nothing is published while a frozen leader holds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from awooop.core.config_names import check_url as _check_url
from awooop.core.config_names import env_name as env_name
from awooop.core.errors import ConfigError
from awooop.core.leadership import check_timings
from awooop.core.lease_bounds import check_lease_bounds

# The largest step result a handler may journal, as JSON (awooop.worker.step_values).
STEP_RESULT_MAX_BYTES = 256 * 1024
# The most streamed output a run keeps (awooop.worker.output; then truncated).
OUTPUT_MAX_BYTES = 1024 * 1024
SIGNAL_PAYLOAD_MAX_BYTES = 64 * 1024
SIGNALS_PER_RUN_MAX = 100


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    database_url: str = "postgresql://postgres@127.0.0.1:5432/awooop"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_key_prefix: str = "awooop"
    shard_count: int = 4

    lease_ttl_s: float = 30.0
    heartbeat_interval_s: float = 5.0
    lease_safety_fraction: float = 0.1
    # A worker holds its leases through its session (migration 0161): its heartbeat renews one
    # row; each run's own lease (run_lease_s) is renewed only when half of it is gone or when
    # the attempt's step changes. False: every lease renewed on its own every interval.
    session_leases: bool = True
    run_lease_ttl_s: float = 0.0  # 0: ten times lease_ttl_s (see run_lease_s)
    db_statement_timeout_s: float = 0.0  # 0: a third of the local lease (see lease_io_timeout_s)
    redis_socket_timeout_s: float = 10.0
    reaper_interval_s: float = 10.0
    reclaim_interval_s: float = 10.0
    max_attempts: int = 3
    max_deliveries: int = 10
    shutdown_grace_s: float = 20.0
    worker_concurrency: int = 16
    # The code version of a worker's handler ("": declared by the handler, else derived from its
    # module's source; awooop.worker.handler_version). `awooop worker --handler-version` wins.
    handler_version: str = ""
    # Connections per role pool of a worker (three pools); 0: from the concurrency
    # (awooop.commands.worker.pool_size). See worker_connections for the process's total.
    db_pool_size: int = 0
    poll_interval_s: float = 5.0
    # Fair share between projects (awooop.runs.fairness): a worker takes waiting runs in the
    # weighted fair order of their projects, not in arrival order. False: arrival order.
    fair_share: bool = True
    # The largest result a step (or a tool wait) may journal, as JSON bytes (E-DATA-002 above).
    step_result_max_bytes: int = STEP_RESULT_MAX_BYTES
    # How often a long-running process refreshes its awooop_processes row, rechecks the schema.
    schema_recheck_s: float = 30.0

    dedupe_ttl_s: float = 7 * 24 * 3600.0
    dedupe_expiry_interval_s: float = 60.0
    approval_ttl_s: float = 15 * 60.0
    # The time-partitioned log (awooop.eventlog.partitions, awooop.eventlog.archive): partition
    # length, how long a partition stays after it ends, where archived partitions go ("" keeps
    # them).
    log_partition_days: int = 7
    log_retention_days: float = 28.0
    log_archive_dir: str = ""
    log_partitions_interval_s: float = 600.0
    approval_resolver_interval_s: float = 10.0
    # Durable sleep and signals (docs/workers.md): the timers loop's poll fallback, its batch,
    # its least time between two firing iterations (docs/reference.md); a signal's limits.
    timer_poll_interval_s: float = 10.0
    timer_batch_size: int = 500
    timer_coalesce_s: float = 0.03
    # How long past its due time the timers loop leaves a wait to the worker that holds it; the
    # sleeps a worker holds and fires itself: due within the horizon, at most so many.
    timer_grace_s: float = 0.2
    worker_timer_horizon_s: float = 60.0
    worker_timers_max: int = 10_000
    signal_payload_max_bytes: int = SIGNAL_PAYLOAD_MAX_BYTES
    signals_per_run_max: int = SIGNALS_PER_RUN_MAX
    # How long the signals of a finished run are kept (the dedupe_expiry loop).
    signal_retention_s: float = 7 * 86400.0
    # Child runs (docs/workers.md): how many unfinished children one run may have at once.
    children_pending_max: int = 1000
    # How often the bulk_operations loop looks for operations whose process stopped.
    bulk_operations_interval_s: float = 10.0
    # Schedules (awooop.schedules): the schedules loop's period, the most schedules a project
    # may have, the shortest interval between two fires of a cron, the most fire times one
    # `all` catch-up starts, and how late the loop may see a fire time that is still on time.
    schedules_interval_s: float = 1.0
    schedules_per_project: int = 1000
    schedule_min_interval_s: int = 60
    schedule_catch_up_max: int = 100
    schedule_grace_s: float = 15.0

    relay_poll_interval_s: float = 1.0
    relay_batch_size: int = 1000
    relay_trim_interval_s: float = 5.0
    relay_linger_s: float = 0.02
    relay_dispatch_window_s: float = 0.005
    relay_leader_lease_s: float = 8.0
    relay_leader_renew_s: float = 2.0
    relay_stall_s: float = 30.0
    stream_maxlen: int = 100_000

    projector_reconcile_interval_s: float = 60.0
    projector_max_in_flight: int = 64
    projector_reclaim_idle_s: float = 30.0
    projections: str = ""  # services' projections: module:object, ... (docs/consumers.md)

    policy_revalidate_s: float = 30.0
    channel_event_revalidate_s: float = 300.0

    llm_url: str = "local:"
    llm_timeout_s: float = 60.0
    llm_max_connections: int = 16
    llm_default_model: str = "llama3.2"
    # The longest a model call waits for a rate-limit token or a budget (E-BUDGET-002 after).
    llm_flow_max_wait_s: float = 3600.0
    # How long the reservations of finished model calls and ended waits are kept (the
    # dedupe_expiry loop deletes older ones: awooop.llm.flow_retention).
    llm_flow_retention_s: float = 7 * 86400.0
    pointer_check_connections: int = 2

    # Streamed run output (run.emit_output; awooop.worker.output, awooop.runs.output_log): a
    # run's chunks are flushed at most this often or once this many bytes wait (one row each);
    # at most output_max_bytes per run (then truncated, with a marker); kept this long.
    output_flush_interval_s: float = 0.1
    output_flush_bytes: int = 16 * 1024
    output_max_bytes: int = OUTPUT_MAX_BYTES
    output_retention_s: float = 7 * 86400.0
    # Readers (GET .../runs/{id}/output as server-sent events, the console): streams at once
    # per project and per server process, the longest one stream lasts, and the longest a
    # reader waits without a notice before it reads again.
    output_streams_per_project: int = 8
    output_streams: int = 256
    output_stream_max_s: float = 900.0
    output_poll_s: float = 2.0

    http_host: str = "127.0.0.1"
    http_port: int = 8080
    http_max_body_bytes: int = 1024 * 1024
    http_workers: int = 1
    http_db_pool_size: int = 10
    http_header_timeout_s: float = 5.0
    http_body_timeout_s: float = 10.0
    # Management and console requests: each statement's time limit, and how many requests one
    # project (admin tokens: the platform project) may have in progress in a process.
    http_statement_timeout_s: float = 10.0
    http_tenant_requests: int = 4
    ingest_config_cache_s: float = 2.0
    # The bound of an ingest's database work (each statement on the server: statement and lock
    # timeouts; the whole call on the client): past it 503 E-DB-003, nothing left running.
    ingest_timeout_s: float = 10.0
    # The console (/ui): a trace id links to this URL with {trace_id} replaced ("" no link),
    # and a browser session lasts this long (or until its token is revoked).
    console_trace_url: str = ""
    console_session_s: float = 8 * 3600.0
    # How often a run page fetches itself again (the list 2.5 times less often); 0: never.
    console_live_s: float = 2.0
    ingest_batch_max_deliveries: int = 64
    metrics_port: int = 0
    stats_interval_s: float = 15.0

    log_level: str = "info"
    loop_project_id: str = "legacy_awoooi_default"

    def __post_init__(self) -> None:
        _check_url("database_url", self.database_url, ("postgresql", "postgres"))
        _check_url("redis_url", self.redis_url, ("redis", "rediss", "redis+cluster"))
        for name in (
            "lease_ttl_s",
            "heartbeat_interval_s",
            "reaper_interval_s",
            "reclaim_interval_s",
            "poll_interval_s",
            "shutdown_grace_s",
            "dedupe_ttl_s",
            "dedupe_expiry_interval_s",
            "approval_ttl_s",
            "approval_resolver_interval_s",
            "timer_poll_interval_s",
            "bulk_operations_interval_s",
            "schedules_interval_s",
            "schedule_grace_s",
            "log_partitions_interval_s",
            "relay_poll_interval_s",
            "relay_trim_interval_s",
            "policy_revalidate_s",
            "projector_reconcile_interval_s",
            "projector_reclaim_idle_s",
            "channel_event_revalidate_s",
            "llm_timeout_s",
            "llm_flow_max_wait_s",
            "llm_flow_retention_s",
            "signal_retention_s",
            "stats_interval_s",
            "redis_socket_timeout_s",
            "http_header_timeout_s",
            "http_body_timeout_s",
            "http_statement_timeout_s",
            "console_session_s",
            "ingest_timeout_s",
            "output_flush_interval_s",
            "output_retention_s",
            "output_stream_max_s",
            "output_poll_s",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{env_name(name)} must be a positive number of seconds")
        for name in (
            "shard_count",
            "max_attempts",
            "max_deliveries",
            "worker_concurrency",
            "relay_batch_size",
            "projector_max_in_flight",
            "stream_maxlen",
            "http_max_body_bytes",
            "http_workers",
            "http_db_pool_size",
            "http_tenant_requests",
            "ingest_batch_max_deliveries",
            "llm_max_connections",
            "pointer_check_connections",
            "log_partition_days",
            "step_result_max_bytes",
            "schedules_per_project",
            "schedule_catch_up_max",
            "output_flush_bytes",
            "output_max_bytes",
            "output_streams_per_project",
            "output_streams",
            "timer_batch_size",
            "signal_payload_max_bytes",
            "signals_per_run_max",
            "children_pending_max",
            "worker_timers_max",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{env_name(name)} must be a positive integer")
        if self.schedule_min_interval_s < 60:
            raise ConfigError(
                f"{env_name('schedule_min_interval_s')} must be at least 60 (a cron's minute)"
            )
        check_lease_bounds(self)
        problem = check_timings(self.relay_leader_lease_s, self.relay_leader_renew_s)
        if problem is not None:
            raise ConfigError(
                f"{env_name('relay_leader_lease_s')} and {env_name('relay_leader_renew_s')}: "
                f"{problem}"
            )
        if self.relay_stall_s < self.redis_socket_timeout_s + self.relay_leader_lease_s:
            # A step that waited out one Redis socket timeout and one statement timeout (the
            # leader's connection has statement_timeout at the lease) and then succeeded is
            # slow, not stuck: it must not cost the leadership.
            raise ConfigError(
                f"{env_name('relay_stall_s')} must be at least {env_name('redis_socket_timeout_s')}"
                f" + {env_name('relay_leader_lease_s')}"
                f" ({self.redis_socket_timeout_s + self.relay_leader_lease_s:g} s)"
            )
        if self.db_pool_size < 0:
            raise ConfigError(
                f"{env_name('db_pool_size')} must be 0 (from the concurrency) or more"
            )
        for name in (
            "relay_linger_s",
            "relay_dispatch_window_s",
            "timer_coalesce_s",
            "timer_grace_s",
            "worker_timer_horizon_s",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{env_name(name)} must be 0 (off) or more seconds")
        if self.log_retention_days <= 0:
            raise ConfigError(f"{env_name('log_retention_days')} must be a positive number of days")
        if self.ingest_config_cache_s < 0:
            raise ConfigError(f"{env_name('ingest_config_cache_s')} must be 0 (off) or more")
        if self.output_flush_bytes < 4:  # a row holds at least one UTF-8 character
            raise ConfigError(f"{env_name('output_flush_bytes')} must be at least 4")
        if self.console_live_s < 0:
            raise ConfigError(f"{env_name('console_live_s')} must be 0 (off) or more")
        for name in ("http_port", "metrics_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ConfigError(f"{env_name(name)} must be a TCP port (0-65535)")
        if not self.llm_url.startswith("local:"):  # local: is the deterministic local model
            _check_url("llm_url", self.llm_url, ("http", "https"))
        if not self.llm_default_model:
            raise ConfigError(f"{env_name('llm_default_model')} must not be empty")
        if self.log_level.lower() not in {"debug", "info", "warning", "error"}:
            raise ConfigError(f"{env_name('log_level')} must be one of debug, info, warning, error")
        if not self.redis_key_prefix or "{" in self.redis_key_prefix:
            raise ConfigError(
                f"{env_name('redis_key_prefix')} must be non-empty and contain no '{{'"
            )

    @property
    def lease_safety_margin_s(self) -> float:
        """How long before the database's lease expiry a worker stops an attempt by its own
        clock (see awooop.worker.heartbeat)."""
        return self.lease_ttl_s * self.lease_safety_fraction

    @property
    def local_lease_s(self) -> float:
        """How long a confirmed renewal keeps an attempt running by the worker's own clock."""
        return self.lease_ttl_s - self.lease_safety_margin_s

    @property
    def run_lease_s(self) -> float:
        """A run's own lease under a worker session: how long a run a live worker forgot
        stays held (awooop.worker.heartbeat)."""
        return self.run_lease_ttl_s or 10 * self.lease_ttl_s

    @property
    def claim_ttl_s(self) -> float:
        """The lease a claim gives a run: its own (longer) lease under a worker session, else
        the lease TTL."""
        return self.run_lease_s if self.session_leases else self.lease_ttl_s

    @property
    def lease_io_timeout_s(self) -> float:
        """The bound on every Postgres wait a lease depends on: ``db_statement_timeout_s``, or
        when that is 0 a third of the local lease (9 s with the defaults), so that a hung
        renewal fails and is tried again twice before the local deadline."""
        return self.db_statement_timeout_s or self.local_lease_s / 3

    @property
    def database_name(self) -> str:
        return urlsplit(self.database_url).path.lstrip("/") or "postgres"


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Read settings from ``environ`` (default ``os.environ``); ``overrides`` win over both."""
    env = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    for field in msgspec.structs.fields(Settings):
        key = env_name(field.name)
        if key in env:
            raw[field.name] = env[key]
    raw.update(overrides)
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except ConfigError:
        raise
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc))) from None


def _explain(message: str) -> str:
    # msgspec says "Expected `float`, got `str` - at `$.lease_ttl_s`": name the variable instead.
    if "$." in message:
        head, _, path = message.rpartition("$.")
        field = path.strip("`").split(".")[0].split("[")[0]
        expected = head.split(" - at")[0]
        return f"{env_name(field)}: {expected}"
    return message
