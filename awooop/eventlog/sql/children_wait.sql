-- child_waits.follow: a parent's open wait for child runs, read under the parent's row lock
-- (every change of a run's wait holds that lock): its step, the children (a JSON array of run
-- ids, in the handler's order) and how many of them must be finished (migration 0145).
SELECT step, children, needed, due_at FROM awooop_run_waits
WHERE run_id = $1 AND kind = 'children'
