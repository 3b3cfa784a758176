-- child_waits.cancel_children: the unfinished children of the cancelled runs $1 that are
-- cancelled with their parent (awooop_run_state_parent_idx), locked in run_id order. A row
-- another transaction holds is skipped, never waited for: that transaction may be the child's
-- own end, waiting for its parent's lock, which the caller holds; the skipped children are left
-- to the timers loop (awooop_child_cancels).
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state
WHERE parent_run_id = ANY($1::uuid[]) AND cancel_with_parent
  AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
ORDER BY run_id
FOR UPDATE SKIP LOCKED
