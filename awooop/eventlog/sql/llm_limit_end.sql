-- llm flow: end project $1's rate limit on model scope $2, by $3 (no row: there was none).
UPDATE awooop_llm_rate_limits
SET valid_to = now(), ended_by = $3
WHERE project_id = $1 AND model = $2 AND valid_to IS NULL
RETURNING limit_id, project_id, model, limit_count, period_s, burst, granted, set_by,
          valid_from, valid_to, ended_by
