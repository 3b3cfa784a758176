-- child_waits.cancel_children: the cancelled runs of $1 that still have unfinished children to
-- cancel (rows that were skipped as locked), with their project, for awooop_child_cancels.
SELECT DISTINCT parent_run_id, project_id
FROM awooop_run_state
WHERE parent_run_id = ANY($1::uuid[]) AND cancel_with_parent
  AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
