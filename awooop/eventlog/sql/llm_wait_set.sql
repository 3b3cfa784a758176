-- llm flow: run $1 (project $2) attempt $3 waits: $4 reason, $5 key, $6 detail, until $7.
INSERT INTO awooop_llm_waits (run_id, project_id, attempt, reason, wait_key, detail, until)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (run_id) DO UPDATE
SET attempt = EXCLUDED.attempt, reason = EXCLUDED.reason, wait_key = EXCLUDED.wait_key,
    detail = EXCLUDED.detail, until = EXCLUDED.until, ended_at = NULL,
    since = CASE WHEN awooop_llm_waits.ended_at IS NULL
                  AND awooop_llm_waits.attempt = EXCLUDED.attempt
                  AND awooop_llm_waits.reason = EXCLUDED.reason
                 THEN awooop_llm_waits.since ELSE now() END
