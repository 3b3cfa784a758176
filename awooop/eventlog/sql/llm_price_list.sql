-- llm flow: the prices of project $1 (NULL: every project the role sees) in force, with $2
-- the ended ones too, only model $4 when not NULL, newest first, at most $3.
SELECT price_id, project_id, model, input_price, output_price, set_by, valid_from, valid_to,
       ended_by
FROM awooop_llm_prices
WHERE ($1::text IS NULL OR project_id = $1) AND ($2 OR valid_to IS NULL)
  AND ($4::text IS NULL OR model = $4)
ORDER BY valid_from DESC
LIMIT $3
