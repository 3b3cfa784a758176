-- versions.clear: contract $2 of project $1 requires no handler version any more (every
-- worker that serves it takes its runs again); the row removed, or none.
DELETE FROM awooop_handler_versions
WHERE project_id = $1 AND contract_id = $2
RETURNING project_id, contract_id, versions, set_by, set_at
