-- run_reads.LOCK_MANY: the rows of the runs in $1, locked in run_id order, so that two batches
-- locking overlapping runs cannot deadlock (the order of complete_many.sql's lock too).
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state
WHERE run_id = ANY($1::uuid[])
ORDER BY run_id
FOR UPDATE
