-- awooop.log.deadletters.resolve_runs: close the open dead letters of these runs
-- ($1 projects and $2 runs, pairwise) through awooop_dead_letters_open_run_idx.
UPDATE awooop_dead_letters AS d
SET resolved_at = now(), resolution = $3, resolved_by = $4
FROM unnest($1::text[], $2::uuid[]) AS r (project_id, run_id)
WHERE d.project_id = r.project_id AND d.run_id = r.run_id AND d.resolved_at IS NULL
RETURNING d.dead_letter_id
