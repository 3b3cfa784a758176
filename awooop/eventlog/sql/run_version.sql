-- run_reads.VERSION (run_rows.version_of, the console's live pages): one run's version and
-- status through the primary key, no lock, and the database clock.
SELECT version, status, now() AS db_now
FROM awooop_run_state WHERE run_id = $1
