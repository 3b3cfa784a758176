-- llm flow: the rate limits, budgets and price in force for a model call of project $1 on
-- model $2 (the project-wide rows, model '', and the model's own), project-wide first. A
-- budget's amount is in its unit (tokens, or credits for a cost budget).
SELECT 'limit' AS kind, limit_id AS id, model, period_s, NULL::bigint AS amount,
       NULL::integer AS reserve_tokens, NULL::text AS on_exceed, NULL::text AS unit,
       NULL::numeric AS input_price, NULL::numeric AS output_price
FROM awooop_llm_rate_limits
WHERE project_id = $1 AND model IN ('', $2) AND valid_to IS NULL
UNION ALL
SELECT 'budget', budget_id, model, period_s, CASE WHEN unit = 'cost' THEN cost ELSE tokens END,
       reserve_tokens, on_exceed, unit, NULL, NULL
FROM awooop_llm_budgets
WHERE project_id = $1 AND model IN ('', $2) AND valid_to IS NULL
UNION ALL
SELECT 'price', price_id, model, NULL, NULL, NULL, NULL, NULL, input_price, output_price
FROM awooop_llm_prices
WHERE project_id = $1 AND model = $2 AND valid_to IS NULL
ORDER BY 1, 3
