-- child_waits.cancel_left: the parents of $1 whose children are all cancelled or finished now
-- (not in $2, those still left).
DELETE FROM awooop_child_cancels
WHERE parent_run_id = ANY($1::uuid[]) AND NOT parent_run_id = ANY($2::uuid[])
