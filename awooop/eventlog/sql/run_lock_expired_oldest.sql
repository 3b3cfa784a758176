-- run_reads.LOCK_EXPIRED_OLDEST (the reaper and the polling path): expired leases, oldest
-- first, at most $1: the leased runs read through an index (by worker: migration 0158 says why
-- not by lease_until), each lease_until compared row by row.
WITH served AS (  -- _run_served.sql
    SELECT $2::text[] AS contracts, $3::text[] AS projects, $4::text AS version
)
SELECT {{run_columns}}, now() AS db_now, {{run_heartbeat_at}} AS heartbeat_seen,
       {{run_paused}} AS paused,
       NOT {{run_admitted}} AS over_limit
FROM awooop_run_state AS r
WHERE status IN ('RUNNING', 'WAITING_TOOL')
  AND {{lease_expired}}
  AND {{run_served}}  -- $2-$4: the worker's routes and version (the reaper: NULL, every run)
ORDER BY lease_until
LIMIT $1
FOR UPDATE SKIP LOCKED
