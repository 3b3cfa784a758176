-- run_reads.LOCK_WAIT_HELD (awooop.runs.timers.fire_held): of the runs $1, each at the version
-- $2 its worker left it sleeping at (awooop.worker.local_timers), those still WAITING_EVENT at
-- that version, locked in run_id order. A row another transaction holds (the timers loop
-- firing it, a signal, a cancel) is skipped, and a row changed since is left out when the
-- lock reads it again: the run is no longer this worker's to fire. The caller reads the waits
-- again under the lock and fires only those due.
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state
WHERE run_id = ANY($1::uuid[])
  AND (run_id, version) IN (SELECT h.run_id, h.version
                            FROM unnest($1::uuid[], $2::int[]) AS h(run_id, version))
  AND status = 'WAITING_EVENT'
ORDER BY run_id
FOR UPDATE SKIP LOCKED
