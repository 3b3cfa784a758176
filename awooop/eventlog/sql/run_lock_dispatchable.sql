-- run_reads.LOCK_DISPATCHABLE (leases.poll, after run_lock_fair.sql): dispatchable runs that
-- have waited at least $1 seconds (no stream message got them taken), oldest first, at most
-- $2, through the partial index on dispatchable runs, except those ($3) the fair pass took.
-- Suspects are left to the isolated claim (run_lock_suspect.sql); paused runs are skipped
-- (_run_paused.sql): once resumed, this is the path that takes them; so are runs whose concurrency key is at its limit (_run_admitted.sql), until a slot frees.
WITH served AS (  -- _run_served.sql
    SELECT $4::text[] AS contracts, $5::text[] AS projects, $6::text AS version
)
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state AS r
WHERE status IN ('PENDING', 'RESUMED')
  AND run_id <> ALL($3::uuid[])  -- locked by run_lock_fair.sql in this transaction
  AND (lease_until IS NULL OR lease_until < now())
  AND updated_at <= now() - make_interval(secs => $1)
  AND suspect_worker_id IS NULL
  AND {{run_served}}  -- $4-$6: the worker's routes and version
  AND NOT {{run_paused}}
  AND {{run_admitted}}
ORDER BY created_at
LIMIT $2
FOR UPDATE SKIP LOCKED
