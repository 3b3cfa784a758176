-- child_waits.resume_if_satisfied: how many of the children $1 of run $2 have finished, by
-- their committed states (primary-key probes; no child's result is read until the wait is
-- over). Read under the parent's row lock.
SELECT count(*) FROM awooop_run_state
WHERE run_id = ANY($1::uuid[]) AND parent_run_id = $2
  AND status IN ('COMPLETED', 'FAILED', 'CANCELLED')
