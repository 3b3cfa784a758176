-- llm flow: reserve $5 (tokens or credits, the counter's unit $7) on the counter ($1 project,
-- $2 model scope, $3 period_s, $4 period start) if settled plus reserved plus $5 stays within
-- $6. No row: refused.
UPDATE awooop_llm_budget_usage
SET reserved = reserved + $5
WHERE project_id = $1 AND model = $2 AND unit = $7 AND period_s = $3 AND period_start = $4
  AND used + reserved + $5 <= $6
RETURNING used, reserved
