-- awooop.log.deadletters.open_of_runs: the open dead letters of these runs ($1 projects and
-- $2 runs, pairwise), through awooop_dead_letters_open_run_idx: one probe per run.
SELECT d.*
FROM unnest($1::text[], $2::uuid[]) AS r (project_id, run_id)
JOIN awooop_dead_letters AS d
  ON d.project_id = r.project_id AND d.run_id = r.run_id AND d.resolved_at IS NULL
