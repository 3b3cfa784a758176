-- llm flow: the rate limits of project $1 (NULL: every project the role sees) in force, with
-- $2 the ended ones too, newest first, at most $3; a row in force with the tokens its bucket
-- holds now (``available``).
SELECT l.limit_id, l.project_id, l.model, l.limit_count, l.period_s, l.burst, l.granted,
       l.set_by, l.valid_from, l.valid_to, l.ended_by,
       CASE WHEN l.valid_to IS NULL THEN {{llm_bucket_level}} END AS available
FROM awooop_llm_rate_limits l
CROSS JOIN (SELECT clock_timestamp() AS t) c
WHERE ($1::text IS NULL OR l.project_id = $1) AND ($2 OR l.valid_to IS NULL)
ORDER BY l.valid_from DESC
LIMIT $3
