-- run_reads.LOCK_EXPIRED (leases.take_expired): one run whose lease expired, locked (a worker
-- takes it: requeue and claim in one transaction).
WITH served AS (  -- _run_served.sql
    SELECT $2::text[] AS contracts, $3::text[] AS projects, $4::text AS version
)
SELECT {{run_columns}}, now() AS db_now, {{run_heartbeat_at}} AS heartbeat_seen,
       {{run_paused}} AS paused,
       NOT {{run_admitted}} AS over_limit
FROM awooop_run_state AS r
WHERE run_id = $1
  AND status IN ('RUNNING', 'WAITING_TOOL')
  AND {{lease_expired}}
  AND {{run_served}}  -- $2, $3, $4: the worker's routes and version
FOR UPDATE SKIP LOCKED
