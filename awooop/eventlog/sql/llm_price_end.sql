-- llm flow: end project $1's price of model $2, by $3 (no row: there was none).
UPDATE awooop_llm_prices
SET valid_to = now(), ended_by = $3
WHERE project_id = $1 AND model = $2 AND valid_to IS NULL
RETURNING price_id, project_id, model, input_price, output_price, set_by, valid_from,
          valid_to, ended_by
