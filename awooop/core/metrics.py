"""Every Prometheus metric of the runtime, defined once (R-51, R-42).

Processes serve the default registry on ``/metrics`` (see :mod:`awooop.core.telemetry`). Names are
part of the operator contract (alerts and dashboards in ``ops/`` use them): keep them.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

_owned_lock = threading.Lock()
_owned: set[int] = set()


def owned(gauge: Gauge) -> Gauge:
    """``gauge`` (made with ``registry=None``), exported from the first time this process sets
    it. For an unlabelled gauge that only the process running one loop knows: registered at
    import, every other process would export it as 0, and a rule over the fleet (min, or a
    threshold) would read that 0 as the truth."""
    with _owned_lock:
        if id(gauge) not in _owned:
            REGISTRY.register(gauge)
            _owned.add(id(gauge))
    return gauge


# --- ingest ---------------------------------------------------------------------------------
INGEST_EVENTS = Counter(
    "awooop_ingest_events_total",
    "Channel events received, by outcome (created, duplicate, rejected)",
    ["channel_type", "outcome"],
)
INGEST_LATENCY = Histogram(
    "awooop_ingest_seconds",
    "Time to accept one channel request (authentication to commit)",
    ["channel_type"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
INGEST_BATCH = Histogram(
    "awooop_ingest_batch_deliveries",
    "Concurrent HTTP deliveries written in one ingest statement (group commit)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
DEDUPE_EXPIRED = Counter(
    "awooop_dedupe_expired_total",
    "Expired channel-event dedupe rows dropped with their window by the expiry loop",
)
DEDUPE_WINDOWS_AHEAD = Gauge(
    "awooop_dedupe_windows_ahead_seconds",
    "Time until the newest window of the dedupe table ends (ingest claims the next window too, "
    "so it is refused a week before that; the dedupe_expiry loop keeps it 2-3 weeks ahead); "
    "exported only by processes that run that loop",
    registry=None,
)
LOG_PARTITION_AHEAD = Gauge(
    "awooop_log_partition_ahead_seconds",
    "Time until the newest partition of the event log ends (writes after that are refused; the "
    "log_partitions loop keeps it about 14 days ahead); exported only by processes that run "
    "that loop",
    registry=None,
)
LOG_PARTITIONS_ARCHIVED = Counter(
    "awooop_log_partitions_archived_total",
    "Partitions of the event log written to the archive and dropped",
)
LOG_ARCHIVE_REFUSED = Counter(
    "awooop_log_archive_refused_total",
    "Archive attempts of a due partition refused for now (live runs, a follower behind)",
)

READINESS_DEGRADED = Gauge(
    "awooop_readiness_degraded",
    "1 while /readyz last found an optional dependency (redis) unreachable: the process stays "
    "ready for ingest, degraded",
    ["dependency"],
)

# --- runs and leases ------------------------------------------------------------------------
RUNS_BY_STATE = Gauge(
    "awooop_runs", "Runs by project and state (sampled by the stats loop)", ["project_id", "state"]
)
LEASE_CLAIMS = Counter("awooop_lease_claims_total", "Run leases taken", ["path"])
LEASE_RENEWALS = Counter("awooop_lease_renewals_total", "Run leases renewed by heartbeats")
LEASE_LOSSES = Counter("awooop_lease_losses_total", "Leases a worker found lost (fenced off)")
CANCEL_NOTICES = Counter(
    "awooop_cancel_notices_total",
    "Cancel notices checked against Postgres for runs this worker holds, by what the row said",
    ["verdict"],
)
RECLAIMS = Counter(
    "awooop_reclaims_total",
    "Pending entries reclaimed from idle consumers, by outcome",
    ["outcome"],
)
REAPED = Counter("awooop_reaped_runs_total", "Stale runs handled by the reaper", ["outcome"])
DEAD_LETTERS = Counter("awooop_dead_letters_total", "Dead letters recorded (awooop_dead_letters)")
RUNS_OLDEST_AGE = Gauge(
    "awooop_runs_oldest_age_seconds",
    "Age of the longest-unchanged live run by project and state (sampled by the stats loop)",
    ["project_id", "state"],
)
RUNS_OVERDUE = Gauge(
    "awooop_runs_overdue",
    "Runs a platform loop should already have handled, by reason (lease_expired: the reaper; "
    "approval_expired: the approval resolver; timer_due: the timers loop), sampled by the "
    "stats loop",
    ["project_id", "reason"],
)
TIMERS_OVERDUE = Gauge(
    "awooop_timers_overdue_seconds",
    "How long past its due time the earliest open wait (a sleep, an event wait's timeout) is, "
    "0 when none is due: it grows while the timers loop is stopped or behind (stats loop)",
    registry=None,  # exported by the processes that run the stats loop only: owned()
)
PAUSED_SCOPES = Gauge(
    "awooop_paused_scopes",
    "Active pauses by scope (project, channel, contract), sampled by the stats loop; the runs "
    'they hold back are awooop_runs_blocked{reason="paused"}',
    ["scope"],
)
CONCURRENCY_KEY_RUNS = Gauge(
    "awooop_concurrency_key_runs",
    "Runs per concurrency key: executing (holding a slot: a live lease) and waiting (PENDING, "
    "RESUMED); only the keys with the most runs waiting, then executing (the top 20), so "
    "that the label sets stay bounded; sampled by the stats loop",
    ["project_id", "key", "state"],
)
RUNS_BLOCKED = Gauge(
    "awooop_runs_blocked",
    "Live and FAILED runs by project and blocked_on reason (what each waits for: "
    "pending_no_worker, retry_pending, running, waiting_approval, failed_dead_lettered, ...), "
    "sampled by the stats loop",
    ["project_id", "reason"],
)
TIMERS_FIRED = Counter(
    "awooop_timers_fired_total",
    "Waits the timers loop ended at their due time (sleeps, event waits that timed out)",
)
WORKER_TIMERS_FIRED = Counter(
    "awooop_worker_timers_fired_total",
    "Sleeps a worker fired itself when they came due (its own attempts' sleeps, due within "
    "AWOOOP_WORKER_TIMER_HORIZON_S); the rest are the timers loop's (awooop_timers_fired_total)",
)
CHILD_RUNS_STARTED = Counter(
    "awooop_child_runs_started_total",
    "Child runs this worker's attempts started (run.start_child; a replayed start is not counted)",
)
SIGNALS_DELIVERED = Counter(
    "awooop_signals_delivered_total",
    "Signals delivered to a run's event wait, by path (send: as sent; wait: kept, taken when "
    "the wait started; loop: pending, delivered by the timers loop)",
    ["path"],
)
RUNS_FINISHED = Counter(
    "awooop_runs_finished_total", "Runs that reached a terminal state", ["status"]
)

# --- outbox, relay and streams --------------------------------------------------------------
OUTBOX_LAG = Gauge(
    "awooop_outbox_lag_seconds",
    "Age of the oldest undelivered outbox row, as the relay sees it (set by the relay)",
    ["outbox"],
)
OUTBOX_BACKLOG = Gauge(
    "awooop_outbox_backlog_seconds",
    "Age of the oldest outbox entry not yet delivered, read from Postgres by the stats loop "
    "(events: after the relay's saved cursor; contract: rows not marked delivered), so it "
    "rises while the relay is stopped or hung",
    ["outbox"],
)
RELAY_PUBLISHED = Counter("awooop_relay_published_total", "Entries published", ["outbox"])
RELAY_ATTEMPTS = Counter(
    "awooop_relay_attempts_total", "Relay publish attempts, by result", ["outbox", "result"]
)
CONSUMER_LAG = Gauge(
    "awooop_consumer_group_lag", "Entries not yet delivered to a group", ["stream", "group"]
)
CONSUMER_PENDING = Gauge(
    "awooop_consumer_group_pending", "Entries delivered but not acknowledged", ["stream", "group"]
)
DEAD_LETTERS_OPEN = Gauge(
    "awooop_dead_letters_open",
    "Open dead letters by project, read from Postgres by the stats loop (__platform__ always "
    "present: dead letters without a run)",
    ["project_id"],
)
STREAM_RESETS = Counter(
    "awooop_stream_resets_total", "Times a shard's Redis data was found lost and rebuilt"
)

# --- revisions and the model ----------------------------------------------------------------
REVISION_CACHE_HITS = Counter("awooop_revision_cache_hits_total", "Revision cache hits")
REVISION_CACHE_MISSES = Counter("awooop_revision_cache_misses_total", "Revision cache misses")
REVISION_CACHE_STALE = Counter(
    "awooop_revision_cache_stale_total",
    "Cached revisions found stale, by how (pointer_check, notice, revalidation)",
    ["source"],
)
POINTER_CHECK_SECONDS = Histogram(
    "awooop_pointer_check_seconds",
    "Latency of the active-revision pointer check before an LLM call",
    buckets=(0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05),
)
POINTER_CHECK_STATEMENTS = Counter(
    "awooop_pointer_check_statements_total",
    "Pointer check statements sent; calls that wait for a connection share one "
    "(awooop_pointer_check_seconds_count: the calls)",
)
LLM_CALLS = Counter("awooop_llm_calls_total", "Model calls, by result", ["result"])
LLM_SECONDS = Histogram("awooop_llm_call_seconds", "Model call latency")
LLM_THROTTLED = Counter(
    "awooop_llm_throttled_total",
    "Model calls held back by flow control: waited for a rate-limit token (rate_limited) or a "
    "budget (over_budget), or refused (refused: E-BUDGET-001/002); a call counts once per reason",
    ["reason"],
)
LLM_BUDGET_TOKENS = Counter(
    "awooop_llm_budget_tokens_charged_total",
    "Tokens charged to model-call budgets when calls settle (input plus output as reported)",
)
LLM_BUDGET_USAGE = Gauge(
    "awooop_llm_budget_tokens",
    "Tokens of the current budget period per project (the top projects by use, bounded) and "
    "state (used: settled, reserved: calls in flight, limit), sampled by the stats loop",
    ["project_id", "state"],
)

# --- background loops (R-42) ----------------------------------------------------------------
LOOP_LAST_RUN = Gauge(
    "awooop_background_loop_last_run_timestamp",
    "Unix time of the loop's last successful iteration",
    ["loop_name", "project_id"],
)
LOOP_INTERVAL = Gauge(
    "awooop_background_loop_interval_seconds",
    "The loop's cycle: its interval plus the longest healthy iteration (the staleness alert's "
    "threshold grows with it)",
    ["loop_name", "project_id"],
)
LOOP_ERRORS = Counter(
    "awooop_background_loop_errors_total",
    "Loop iterations that raised",
    ["loop_name", "project_id"],
)
LOOP_SECONDS = Histogram(
    "awooop_background_loop_iteration_seconds",
    "Duration of loop iterations",
    ["loop_name"],
)

# --- schedules ------------------------------------------------------------------------------
SCHEDULE_FIRES = Counter(
    "awooop_schedule_fires_total",
    "Fire times of schedules the schedules loop handled, by outcome (started, duplicate, "
    "skipped_overlap, refused, missed: passed over by the catch-up policy, failed)",
    ["outcome"],
)
SCHEDULE_LAG = Histogram(
    "awooop_schedule_fire_lag_seconds",
    "How long after its due moment (fire time plus jitter) the loop fired a schedule",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600),
)

# --- projections ----------------------------------------------------------------------------
PROJECTOR_EVENTS = Counter(
    "awooop_projector_events_total",
    "Events handled by projectors, by outcome (applied, duplicate, filled: applied from the "
    "Postgres log to fill a gap)",
    ["projection", "outcome"],
)
PROJECTOR_RECONCILED = Counter(
    "awooop_projector_reconciled_events_total",
    "Events a projector's reconcile pass applied from Postgres (missed on the streams)",
    ["projection"],
)
PROJECTOR_FAILURES = Counter(
    "awooop_projector_batch_failures_total",
    "Projector batches that failed and were left pending for redelivery",
    ["projection"],
)

# --- streamed run output ----------------------------------------------------------------------
OUTPUT_ROWS = Counter(
    "awooop_output_rows",
    "Rows of streamed run output (run.emit_output) this worker's attempts wrote, one per flush",
)
OUTPUT_TRUNCATED = Counter(
    "awooop_output_truncated",
    "Runs whose output this worker cut at AWOOOP_OUTPUT_MAX_BYTES (a truncation marker written)",
)
OUTPUT_STREAMS = Gauge(
    "awooop_output_streams",
    "Output streams (server-sent events of run output) open in this server process",
)
OUTPUT_STREAMS_REFUSED = Counter(
    "awooop_output_streams_refused",
    "Output streams refused by the caps (429 E-OUTPUT-001 per project, E-OUTPUT-002 per server)",
)

# --- series that exist from the start -------------------------------------------------------
# Every known value of a counter's labels, created at 0 when this module is imported: rate()
# and increase() over a counter work from the first scrape (a series born at its first
# increment loses that increment), and alerts on them see 0 rather than nothing.
# tests/unit/test_metrics_labels.py checks that every literal label value used in the code is
# listed here.
KNOWN_LABELS: dict[Counter, tuple[tuple[str, ...], ...]] = {
    LEASE_CLAIMS: (("stream",), ("reclaim",), ("poll",), ("isolated",), ("timer",)),
    RECLAIMS: (("acked",), ("left",), ("dead_lettered",), ("taken",), ("error",)),
    REAPED: (("requeued",), ("suspected",), ("failed",)),
    RUNS_FINISHED: (("COMPLETED",), ("FAILED",), ("CANCELLED",)),
    RELAY_PUBLISHED: (("events",), ("contract",)),
    RELAY_ATTEMPTS: (
        ("events", "ok"),
        ("events", "error"),
        ("contract", "ok"),
        ("contract", "error"),
    ),
    LLM_CALLS: (("ok",), ("error",)),
    LLM_THROTTLED: (("rate_limited",), ("over_budget",), ("refused",)),
    REVISION_CACHE_STALE: (("pointer_check",), ("notice",), ("revalidation",)),
}


def initialise_known_labels() -> None:
    for counter, values in KNOWN_LABELS.items():
        for labels in values:
            counter.labels(*labels)


initialise_known_labels()
