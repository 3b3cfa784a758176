-- run_reads.LOCK_WAIT_DUE (awooop.runs.timers.fire_due): the runs whose open wait is due (a
-- sleep's due time, an event wait's timeout), the earliest due first across every project, at
-- most $1 (awooop_run_waits_due_idx), locked; a row another transaction holds is skipped, so
-- any number of timers loops fire each wait once. The caller reads the waits again once the
-- rows are locked (a wait of the subquery may have ended meanwhile).
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state
WHERE run_id IN (
    SELECT w.run_id FROM awooop_run_waits w
    WHERE w.due_at <= now()
    ORDER BY w.due_at
    LIMIT $1)
  AND status = 'WAITING_EVENT'
FOR UPDATE SKIP LOCKED
