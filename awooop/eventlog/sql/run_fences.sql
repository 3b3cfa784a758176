-- run_reads.FENCES (leases.fences, a cancel notice's check): who holds each of the runs in $1,
-- through the primary key, no lock, and the database clock. lease_until is the lease as the
-- rule sees it (_run_lease_until.sql: its worker's session too).
SELECT r.run_id, r.status, r.worker_id, r.attempt_count, {{run_lease_until}} AS lease_until,
       now() AS db_now
FROM awooop_run_state AS r WHERE r.run_id = ANY($1::uuid[])
