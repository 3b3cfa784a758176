-- run_reads.PEEK (leases.peek): one run's committed row, no lock, and the database clock.
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state WHERE run_id = $1
