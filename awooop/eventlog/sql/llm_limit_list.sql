-- llm flow: the rate limits of project $1 (NULL: every project the role sees) in force, with
-- $2 the ended ones too, newest first, at most $3.
SELECT limit_id, project_id, model, limit_count, period_s, burst, granted, set_by,
       valid_from, valid_to, ended_by
FROM awooop_llm_rate_limits
WHERE ($1::text IS NULL OR project_id = $1) AND ($2 OR valid_to IS NULL)
ORDER BY valid_from DESC
LIMIT $3
