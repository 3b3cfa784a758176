-- llm flow: the open model-call waits of project $1's RUNNING runs (the run's current attempt
-- waits: awooop_llm_waits by its primary key, from the project's RUNNING runs by
-- awooop_run_state_project_status_idx), as blocked_on reads them.
FROM awooop_run_state rs
JOIN awooop_llm_waits w
    ON w.run_id = rs.run_id AND w.attempt = rs.attempt_count AND w.ended_at IS NULL
WHERE rs.project_id = $1 AND rs.status = 'RUNNING'
