-- run_reads.LOCK_CLAIMABLE (leases.claim): the claim. Locks the row only if it can be claimed
-- right now; a row another transaction holds is skipped, never waited for.
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state AS r
WHERE run_id = $1
  AND status IN ('PENDING', 'RESUMED')
  AND (lease_until IS NULL OR lease_until < now())
  AND suspect_worker_id IS NULL
  AND NOT {{run_paused}}
  AND {{run_admitted}}
FOR UPDATE SKIP LOCKED
