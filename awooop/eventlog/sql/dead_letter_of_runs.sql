-- awooop.eventlog.deadletters.open_of_runs: the open dead letters of the runs in $1, one probe of
-- awooop_dead_letters_open_run_idx each (row-level security keeps other projects' out).
SELECT * FROM awooop_dead_letters
WHERE run_id = ANY($1::uuid[]) AND resolved_at IS NULL
