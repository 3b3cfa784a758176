-- run_reads.LOCK_CLAIMABLE (leases.claim): the claim. Locks the row only if it can be claimed
-- right now and the worker serves it ($2, $3: its routes, $4: its handler version); a row another transaction holds is
-- skipped, never waited for.
WITH served AS (  -- _run_served.sql
    SELECT $2::text[] AS contracts, $3::text[] AS projects, $4::text AS version
)
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state AS r
WHERE run_id = $1
  AND status IN ('PENDING', 'RESUMED')
  AND (lease_until IS NULL OR lease_until < now())
  AND suspect_worker_id IS NULL
  AND {{run_served}}
  AND NOT {{run_paused}}
  AND {{run_admitted}}
FOR UPDATE SKIP LOCKED
