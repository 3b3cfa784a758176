-- llm flow: the rate limits and budgets in force for a model call of project $1 on model $2
-- (its project-wide rows, model '', and the model's own), project-wide first.
SELECT 'limit' AS kind, limit_id AS id, model, limit_count, period_s, burst,
       NULL::bigint AS tokens, NULL::integer AS reserve_tokens, NULL::text AS on_exceed
FROM awooop_llm_rate_limits
WHERE project_id = $1 AND model IN ('', $2) AND valid_to IS NULL
UNION ALL
SELECT 'budget', budget_id, model, NULL, period_s, NULL, tokens, reserve_tokens, on_exceed
FROM awooop_llm_budgets
WHERE project_id = $1 AND model IN ('', $2) AND valid_to IS NULL
ORDER BY 1, 3
