-- runs.apply_and_store(_many): the whole row as apply(state, event) returned it, in RunState's
-- field order (the parameters are msgspec.structs.astuple(state), $1 = run_id; test_log_queries
-- checks the order). The caller holds the row locked.
UPDATE awooop_run_state SET
    project_id = $2, channel_type = $3, provider_event_id = $4, contract_id = $5, status = $6,
    version = $7, attempt_count = $8, max_attempts = $9, worker_id = $10, lease_until = $11,
    heartbeat_at = $12, reaped_at = $13, failure_reason = $14, failure_code = $15,
    saga_steps = $16, input = $17, result = $18, waiting_for = $19, approval_expires_at = $20,
    created_at = $21, updated_at = $22, finished_at = $23,
    suspect_worker_id = $24
WHERE run_id = $1
