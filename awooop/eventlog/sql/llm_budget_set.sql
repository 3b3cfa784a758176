-- llm flow: set project $1's budget on model scope $2 to $3 tokens (unit $8 'tokens') or $9
-- credits (unit 'cost', $3 then 0) per $4 seconds, $5 tokens reserved per call that names no
-- max_tokens, $6 on_exceed, by $7: the row in force ends and its successor starts (the
-- period's usage counter is kept: it is keyed by the scope and the unit).
WITH ended AS (
    UPDATE awooop_llm_budgets
    SET valid_to = now(), ended_by = $7
    WHERE project_id = $1 AND model = $2 AND valid_to IS NULL
    RETURNING budget_id
)
INSERT INTO awooop_llm_budgets
    (project_id, model, tokens, period_s, reserve_tokens, on_exceed, set_by, unit, cost)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
FROM (SELECT count(*) FROM ended) e
RETURNING budget_id, project_id, model, tokens, period_s, reserve_tokens, on_exceed, set_by,
          valid_from, valid_to, ended_by, unit, cost
