-- run_reads.LOCK (runs.store.lock): one run's row, locked, and the database clock.
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state WHERE run_id = $1 FOR UPDATE
