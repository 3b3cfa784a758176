-- llm flow: set project $1's price of model $2 to $3 credits per 1,000 input tokens and $4
-- per 1,000 output tokens, by $5: the row in force ends and its successor starts.
WITH ended AS (
    UPDATE awooop_llm_prices
    SET valid_to = now(), ended_by = $5
    WHERE project_id = $1 AND model = $2 AND valid_to IS NULL
    RETURNING price_id
)
INSERT INTO awooop_llm_prices (project_id, model, input_price, output_price, set_by)
SELECT $1, $2, $3, $4, $5
FROM (SELECT count(*) FROM ended) e
RETURNING price_id, project_id, model, input_price, output_price, set_by, valid_from,
          valid_to, ended_by
