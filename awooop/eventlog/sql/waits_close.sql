-- waits.follow: the waits of runs that left WAITING_EVENT (a timer fired, a signal came, the
-- run was cancelled), removed in the transaction that moved them on.
DELETE FROM awooop_run_waits WHERE run_id = ANY($1::uuid[])
