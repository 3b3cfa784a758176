-- concurrency.listing: the limits of project $1 (NULL: every project the role sees).
SELECT project_id, scope, scope_key, key_expr, max_expr, global_max, depth_cap, set_by, set_at
FROM awooop_concurrency_limits
WHERE ($1::text IS NULL OR project_id = $1)
ORDER BY project_id, scope, scope_key
LIMIT $2
