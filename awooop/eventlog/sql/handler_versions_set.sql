-- versions.require: the handler versions ($3) that runs of contract $2 of project $1 accept,
-- set by $4 (migrations/0140_handler_versions.sql), made or replaced. Every claim statement
-- reads it from the moment it commits (_run_version_accepted.sql). A tenant transaction of
-- the project (row-level security) or the platform role.
INSERT INTO awooop_handler_versions AS v (project_id, contract_id, versions, set_by)
VALUES ($1, $2, $3::text[], $4)
ON CONFLICT (project_id, contract_id) DO UPDATE
SET versions = EXCLUDED.versions, set_by = EXCLUDED.set_by, set_at = now()
RETURNING v.project_id, v.contract_id, v.versions, v.set_by, v.set_at
