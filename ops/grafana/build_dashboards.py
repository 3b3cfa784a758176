"""Build the Grafana dashboards (ops/grafana/dashboards/*.json) from one short description.

    python ops/grafana/build_dashboards.py          # rewrite the JSON files
    python ops/grafana/build_dashboards.py --check  # exit 1 if a JSON file is out of date

Four dashboards: runs, lag, loops, revisions. Every query uses metrics of awooop/core/metrics.py
(tests/unit/test_telemetry_ops.py checks that, and that the files are up to date).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "dashboards"
PROMETHEUS = {"type": "prometheus", "uid": "prometheus"}

# (title, [(expr, legend)], unit)
Panel = tuple[str, list[tuple[str, str]], str]

DASHBOARDS: dict[str, tuple[str, list[Panel]]] = {
    "awooop-runs": (
        "AwoooP / Runs",
        [
            ("Live runs by state", [("sum by (state) (awooop_runs)", "{{state}}")], "short"),
            (
                "Live runs by project",
                [("sum by (project_id) (awooop_runs)", "{{project_id}}")],
                "short",
            ),
            (
                "Runs finished per second",
                [("sum by (status) (rate(awooop_runs_finished_total[5m]))", "{{status}}")],
                "ops",
            ),
            (
                "Durable waits ended, child runs started, per second",
                [
                    ("sum(rate(awooop_timers_fired_total[5m]))", "timers fired"),
                    ("sum(rate(awooop_worker_timers_fired_total[5m]))", "fired by workers"),
                    (
                        "sum by (path) (rate(awooop_signals_delivered_total[5m]))",
                        "signals {{path}}",
                    ),
                    ("sum(rate(awooop_child_runs_started_total[5m]))", "child runs started"),
                ],
                "ops",
            ),
            (
                "Timers past due (the earliest open wait's lateness)",
                [("max(awooop_timers_overdue_seconds)", "overdue")],
                "s",
            ),
            (
                "Channel events per second",
                [
                    (
                        "sum by (channel_type, outcome) (rate(awooop_ingest_events_total[5m]))",
                        "{{channel_type}} {{outcome}}",
                    )
                ],
                "ops",
            ),
            (
                "Ingest latency p95",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, channel_type) "
                        "(rate(awooop_ingest_seconds_bucket[5m])))",
                        "{{channel_type}}",
                    )
                ],
                "s",
            ),
            (
                "Ingest group commit: deliveries per statement",
                [
                    (
                        "sum(rate(awooop_ingest_batch_deliveries_sum[5m])) / "
                        "sum(rate(awooop_ingest_batch_deliveries_count[5m]))",
                        "mean",
                    ),
                    (
                        "histogram_quantile(0.95, sum by (le) "
                        "(rate(awooop_ingest_batch_deliveries_bucket[5m])))",
                        "p95",
                    ),
                ],
                "short",
            ),
            (
                "Expired dedupe rows deleted per second",
                [("sum(rate(awooop_dedupe_expired_total[5m]))", "deleted")],
                "ops",
            ),
            (
                "Streamed output: rows written and runs cut per second",
                [
                    ("sum(rate(awooop_output_rows_total[5m]))", "rows"),
                    ("sum(rate(awooop_output_truncated_total[5m]))", "truncated"),
                ],
                "ops",
            ),
            (
                "Output streams open, and refused per second",
                [
                    ("sum(awooop_output_streams)", "open"),
                    ("sum(rate(awooop_output_streams_refused_total[5m]))", "refused"),
                ],
                "short",
            ),
            (
                "Event log partitions: time left ahead",
                [
                    ("min(awooop_log_partition_ahead_seconds)", "until the newest partition ends"),
                    (
                        "min(awooop_dedupe_windows_ahead_seconds)",
                        "until the newest dedupe window ends",
                    ),
                ],
                "s",
            ),
            (
                "Event log partitions archived and refused per hour",
                [
                    ("sum(increase(awooop_log_partitions_archived_total[1h]))", "archived"),
                    ("sum(increase(awooop_log_archive_refused_total[1h]))", "refused"),
                ],
                "short",
            ),
            (
                "Leases per second",
                [
                    ("sum by (path) (rate(awooop_lease_claims_total[5m]))", "claimed ({{path}})"),
                    ("sum(rate(awooop_lease_renewals_total[5m]))", "renewed"),
                    ("sum(rate(awooop_lease_losses_total[5m]))", "lost"),
                ],
                "ops",
            ),
            (
                "Cancel notices checked per second",
                [
                    (
                        "sum by (verdict) (rate(awooop_cancel_notices_total[5m]))",
                        "{{verdict}}",
                    ),
                ],
                "ops",
            ),
            (
                "Reclaims and reaps per second",
                [
                    ("sum by (outcome) (rate(awooop_reclaims_total[5m]))", "reclaim {{outcome}}"),
                    ("sum by (outcome) (rate(awooop_reaped_runs_total[5m]))", "reap {{outcome}}"),
                ],
                "ops",
            ),
            (
                "Oldest live run by state",
                [("max by (state) (awooop_runs_oldest_age_seconds)", "{{state}}")],
                "s",
            ),
            (
                "Overdue (stuck) runs",
                [
                    (
                        "sum by (project_id, reason) (awooop_runs_overdue)",
                        "{{project_id}} {{reason}}",
                    )
                ],
                "short",
            ),
            (
                "What runs wait for (blocked_on)",
                [("sum by (reason) (awooop_runs_blocked)", "{{reason}}")],
                "short",
            ),
            (
                "Pauses: active pauses by scope, and the runs they hold back",
                [
                    ("sum by (scope) (awooop_paused_scopes)", "{{scope}} pauses"),
                    (
                        'sum by (project_id) (awooop_runs_blocked{reason="paused"})',
                        "{{project_id}} runs held",
                    ),
                ],
                "short",
            ),
            (
                "Concurrency keys: runs executing and waiting per key (the busiest keys only)",
                [
                    (
                        'sum by (project_id, key) (awooop_concurrency_key_runs{state="executing"})',
                        "{{project_id}} {{key}} executing",
                    ),
                    (
                        'sum by (project_id, key) (awooop_concurrency_key_runs{state="waiting"})',
                        "{{project_id}} {{key}} waiting",
                    ),
                ],
                "short",
            ),
        ],
    ),
    "awooop-lag": (
        "AwoooP / Outbox and stream lag",
        [
            (
                "Outbox lag (oldest undelivered): as the relay sees it, and read from Postgres",
                [
                    ("max by (outbox) (awooop_outbox_lag_seconds)", "relay {{outbox}}"),
                    ("max by (outbox) (awooop_outbox_backlog_seconds)", "postgres {{outbox}}"),
                ],
                "s",
            ),
            (
                "Consumer-group lag (not yet delivered)",
                [("sum by (group, stream) (awooop_consumer_group_lag)", "{{group}} {{stream}}")],
                "short",
            ),
            (
                "Consumer-group pending (not acknowledged)",
                [
                    (
                        "sum by (group, stream) (awooop_consumer_group_pending)",
                        "{{group}} {{stream}}",
                    )
                ],
                "short",
            ),
            (
                "Relay published per second",
                [("sum by (outbox) (rate(awooop_relay_published_total[5m]))", "{{outbox}}")],
                "ops",
            ),
            (
                "Relay attempts by result",
                [
                    (
                        "sum by (outbox, result) (rate(awooop_relay_attempts_total[5m]))",
                        "{{outbox}} {{result}}",
                    )
                ],
                "ops",
            ),
            (
                "Dead letters",
                [
                    ("sum(increase(awooop_dead_letters_total[15m]))", "recorded in 15m"),
                    ("sum by (project_id) (awooop_dead_letters_open)", "{{project_id}} open"),
                ],
                "short",
            ),
            (
                "Redis data lost and rebuilt; ingest degraded (Redis unreachable)",
                [
                    ("sum(increase(awooop_stream_resets_total[1h]))", "resets in 1h"),
                    ("max(awooop_readiness_degraded)", "serve degraded"),
                ],
                "short",
            ),
            (
                "Projector events per second by outcome",
                [
                    (
                        "sum by (projection, outcome) (rate(awooop_projector_events_total[5m]))",
                        "{{projection}} {{outcome}}",
                    ),
                    (
                        "sum by (projection) (rate(awooop_projector_reconciled_events_total[5m]))",
                        "{{projection}} reconciled from Postgres",
                    ),
                ],
                "ops",
            ),
            (
                "Projector batches failed (left pending)",
                [
                    (
                        "sum by (projection) "
                        "(increase(awooop_projector_batch_failures_total[15m]))",
                        "{{projection}}",
                    )
                ],
                "short",
            ),
        ],
    ),
    "awooop-loops": (
        "AwoooP / Background loops",
        [
            (
                "Seconds since last successful iteration (alert at 2 cycles, at least 300)",
                [
                    (
                        "time() - awooop_background_loop_last_run_timestamp",
                        "{{loop_name}} {{project_id}}",
                    ),
                    (
                        "clamp_min(2 * awooop_background_loop_interval_seconds, 300)",
                        "threshold {{loop_name}} {{project_id}}",
                    ),
                ],
                "s",
            ),
            (
                "Failed iterations per minute",
                [
                    (
                        "sum by (loop_name, project_id) "
                        "(rate(awooop_background_loop_errors_total[5m])) * 60",
                        "{{loop_name}} {{project_id}}",
                    )
                ],
                "short",
            ),
            (
                "Iteration duration p95",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, loop_name) "
                        "(rate(awooop_background_loop_iteration_seconds_bucket[5m])))",
                        "{{loop_name}}",
                    )
                ],
                "s",
            ),
            (
                "Schedule fire times per minute, by outcome",
                [
                    (
                        "sum by (outcome) (rate(awooop_schedule_fires_total[5m])) * 60",
                        "{{outcome}}",
                    )
                ],
                "short",
            ),
            (
                "Schedule fire lag p95 (after the fire time plus jitter)",
                [
                    (
                        "histogram_quantile(0.95, sum by (le) "
                        "(rate(awooop_schedule_fire_lag_seconds_bucket[5m])))",
                        "p95",
                    )
                ],
                "s",
            ),
        ],
    ),
    "awooop-revisions": (
        "AwoooP / Revisions and model calls",
        [
            (
                "Revision cache per second",
                [
                    ("sum(rate(awooop_revision_cache_hits_total[5m]))", "hits"),
                    ("sum(rate(awooop_revision_cache_misses_total[5m]))", "misses"),
                ],
                "ops",
            ),
            (
                "Revision cache hit ratio",
                [
                    (
                        "sum(rate(awooop_revision_cache_hits_total[5m])) / "
                        "(sum(rate(awooop_revision_cache_hits_total[5m])) + "
                        "sum(rate(awooop_revision_cache_misses_total[5m])))",
                        "hit ratio",
                    )
                ],
                "percentunit",
            ),
            (
                "Stale revisions detected",
                [
                    (
                        "sum by (source) (increase(awooop_revision_cache_stale_total[5m]))",
                        "{{source}}",
                    )
                ],
                "short",
            ),
            (
                "Pointer check latency",
                [
                    (
                        "histogram_quantile(0.5, sum by (le) "
                        "(rate(awooop_pointer_check_seconds_bucket[5m])))",
                        "p50",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        "(rate(awooop_pointer_check_seconds_bucket[5m])))",
                        "p99",
                    ),
                ],
                "s",
            ),
            (
                "Pointer checks per second: calls and statements (shared while waiting)",
                [
                    ("sum(rate(awooop_pointer_check_seconds_count[5m]))", "calls"),
                    ("sum(rate(awooop_pointer_check_statements_total[5m]))", "statements"),
                ],
                "ops",
            ),
            (
                "Model calls per second",
                [("sum by (result) (rate(awooop_llm_calls_total[5m]))", "{{result}}")],
                "ops",
            ),
            (
                "Model calls held back by flow control per second (rate limits, budgets)",
                [("sum by (reason) (rate(awooop_llm_throttled_total[5m]))", "{{reason}}")],
                "ops",
            ),
            (
                "Model-call budget tokens this period (top projects)",
                [
                    (
                        "sum by (project_id, state) (awooop_llm_budget_tokens)",
                        "{{project_id}} {{state}}",
                    ),
                ],
                "short",
            ),
            (
                "Tokens charged to budgets per second",
                [("sum(rate(awooop_llm_budget_tokens_charged_total[5m]))", "tokens")],
                "short",
            ),
            (
                "Model call latency p95",
                [
                    (
                        "histogram_quantile(0.95, sum by (le) "
                        "(rate(awooop_llm_call_seconds_bucket[5m])))",
                        "p95",
                    )
                ],
                "s",
            ),
        ],
    ),
}


def panel(index: int, title: str, targets: list[tuple[str, str]], unit: str) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "datasource": PROMETHEUS,
        "gridPos": {"h": 8, "w": 12, "x": (index % 2) * 12, "y": (index // 2) * 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": PROMETHEUS, "expr": e, "legendFormat": lg}
            for i, (e, lg) in enumerate(targets)
        ],
    }


def dashboard(uid: str, title: str, panels: list[Panel]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["awooop"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "links": [
            {"title": "AwoooP", "type": "dashboards", "tags": ["awooop"], "asDropdown": True}
        ],
        "panels": [panel(i, *p) for i, p in enumerate(panels)],
    }


def rendered() -> dict[Path, str]:
    return {
        OUT / f"{uid.removeprefix('awooop-')}.json": json.dumps(
            dashboard(uid, title, panels), indent=2, sort_keys=True
        )
        + "\n"
        for uid, (title, panels) in DASHBOARDS.items()
    }


def main(argv: list[str]) -> int:
    files = rendered()
    if "--check" in argv:
        stale = [p.name for p, text in files.items() if not p.exists() or p.read_text() != text]
        if stale:
            print(f"out of date: {', '.join(stale)}; run python {__file__}", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
