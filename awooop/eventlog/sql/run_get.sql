-- run_reads.GET (runs.store.load): one run's row, no lock.
SELECT {{run_columns}}
FROM awooop_run_state WHERE run_id = $1
