-- run_reads.LOCK_SUSPECT (leases.claim_suspect): the oldest dispatchable suspect, through the
-- partial index of dispatchable suspects, locked.
WITH served AS (  -- _run_served.sql
    SELECT $1::text[] AS contracts, $2::text[] AS projects, $3::text AS version
)
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state AS r
WHERE suspect_worker_id IS NOT NULL
  AND status IN ('PENDING', 'RESUMED')
  AND (lease_until IS NULL OR lease_until < now())
  AND {{run_served}}  -- $1-$3: the worker's routes and version
  AND NOT {{run_paused}}
  AND {{run_admitted}}
ORDER BY created_at
LIMIT 1
FOR UPDATE SKIP LOCKED
