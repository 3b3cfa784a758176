-- child_runs (the wait's replay): the results of the completed children $1 of run $2 that its
-- journal left in their rows (child_state.RESULTS_INLINE_MAX_BYTES); by primary key, a run that
-- is not $2's child is not answered.
SELECT run_id, result
FROM awooop_run_state
WHERE run_id = ANY($1::uuid[]) AND parent_run_id = $2 AND status = 'COMPLETED'
