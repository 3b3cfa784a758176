-- The columns of awooop_run_state after run_id, in RunState's field order (RunState is
-- awooop.eventlog.state's; test_log_queries holds the two equal). The one place they are written
-- out: every statement that names the row's columns includes {{run_columns}} or this.
project_id, channel_type, provider_event_id, contract_id, status, version,
attempt_count, max_attempts, worker_id, lease_until, heartbeat_at, reaped_at,
failure_reason, failure_code, saga_steps, input, result, waiting_for,
approval_expires_at, created_at, updated_at, finished_at, suspect_worker_id,
concurrency_scope, concurrency_key, concurrency_max, parent_run_id, cancel_with_parent
