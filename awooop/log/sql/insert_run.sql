-- runs.create_run: the row apply(None, RunCreated) built, in RunState's field order (the
-- parameters are msgspec.structs.astuple(state); test_log_queries checks the order).
INSERT INTO awooop_run_state (
    run_id, project_id, channel_type, provider_event_id, contract_id, status, version,
    attempt_count, max_attempts, worker_id, lease_until, heartbeat_at, reaped_at,
    failure_reason, failure_code, saga_steps, input, result, waiting_for, approval_expires_at,
    created_at, updated_at, finished_at, suspect_worker_id
) VALUES (
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
    $21, $22, $23, $24
)
