-- llm flow: end project $1's budget on model scope $2, by $3 (no row: there was none).
UPDATE awooop_llm_budgets
SET valid_to = now(), ended_by = $3
WHERE project_id = $1 AND model = $2 AND valid_to IS NULL
RETURNING budget_id, project_id, model, tokens, period_s, reserve_tokens, on_exceed, set_by,
          valid_from, valid_to, ended_by, unit, cost
