-- child_waits.cancel_left: up to $1 cancelled parents with children left to cancel, oldest first,
-- locked; one held by another transaction is skipped, so any number of timers loops share the
-- work. The caller deletes those it leaves no child to cancel (child_cancels_done).
SELECT parent_run_id FROM awooop_child_cancels
ORDER BY cancelled_at
LIMIT $1
FOR UPDATE SKIP LOCKED
