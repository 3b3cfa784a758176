-- child_waits / runs.children: the committed states of the children $1 of run $2 (by primary
-- key; a run that is not $2's child is not answered). Read under the parent's row lock, after
-- it: every child that finished before is committed, or is this transaction's own.
SELECT run_id, provider_event_id, parent_run_id, status, result, failure_code, failure_reason
FROM awooop_run_state
WHERE run_id = ANY($1::uuid[]) AND parent_run_id = $2
