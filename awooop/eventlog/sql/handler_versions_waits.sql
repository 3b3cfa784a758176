-- versions.waits (blocked_on, awooop/runs/blocked_facts.py): for each (project, contract) pair
-- of $1, $2 whose contract requires handler versions (a probe of the primary key each; rows the
-- role sees), the versions it accepts and those the live worker processes that serve it run
-- (awooop_worker_versions, migration 0140: NULL when none records one).
SELECT v.project_id, v.contract_id, v.versions,
       awooop_worker_versions(v.project_id, v.contract_id) AS running
FROM unnest($1::text[], $2::text[]) AS u(project_id, contract_id)
JOIN awooop_handler_versions AS v
  ON v.project_id = u.project_id AND v.contract_id = u.contract_id
