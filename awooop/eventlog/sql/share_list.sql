-- fairness.shares: the weights of project $1 (NULL: of every project whose weight was ever
-- set), by project, at most $2. Platform role (awooop_projects is not a tenant table).
SELECT project_id, share_weight, share_set_by, share_set_at
FROM awooop_projects
WHERE ($1::text IS NULL AND share_set_at IS NOT NULL) OR project_id = $1
ORDER BY project_id
LIMIT $2
