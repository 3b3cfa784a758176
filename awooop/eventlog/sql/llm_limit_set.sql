-- llm flow: set project $1's rate limit on model scope $2 ('' = every model) to $3 calls per
-- $4 seconds, burst $5, by $6: the row in force ends (valid_to) and its successor starts
-- with the tokens it had left (at most the new burst; a first limit starts full).
WITH ended AS (
    UPDATE awooop_llm_rate_limits
    SET valid_to = now(), ended_by = $6
    WHERE project_id = $1 AND model = $2 AND valid_to IS NULL
    RETURNING tokens
)
INSERT INTO awooop_llm_rate_limits
    (project_id, model, limit_count, period_s, burst, tokens, set_by)
SELECT $1, $2, $3, $4, $5::integer,
       least($5::integer, coalesce((SELECT tokens FROM ended), $5::integer)), $6
RETURNING limit_id, project_id, model, limit_count, period_s, burst, granted, set_by,
          valid_from, valid_to, ended_by
