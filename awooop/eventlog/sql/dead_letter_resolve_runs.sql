-- awooop.eventlog.deadletters.resolve_runs: close the open dead letters of the runs in $1 through
-- awooop_dead_letters_open_run_idx.
UPDATE awooop_dead_letters
SET resolved_at = now(), resolution = $2, resolved_by = $3
WHERE run_id = ANY($1::uuid[]) AND resolved_at IS NULL
RETURNING dead_letter_id
