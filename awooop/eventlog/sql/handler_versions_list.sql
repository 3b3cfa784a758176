-- versions.listing: the required handler versions of project $1 (NULL: of every project the
-- role sees), at most $2 rows, through the primary key.
SELECT project_id, contract_id, versions, set_by, set_at
FROM awooop_handler_versions
WHERE ($1::text IS NULL OR project_id = $1)
ORDER BY project_id, contract_id
LIMIT $2
