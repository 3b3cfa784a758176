-- run_reads.FENCES (leases.fences, a cancel notice's check): who holds each of the runs in $1,
-- through the primary key, no lock, and the database clock.
SELECT run_id, status, worker_id, attempt_count, lease_until, now() AS db_now
FROM awooop_run_state WHERE run_id = ANY($1::uuid[])
