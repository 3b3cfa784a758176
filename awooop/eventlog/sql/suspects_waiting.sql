-- suspects.suspects_waiting (the isolated claim's probe): whether a dispatchable suspect waits
-- for a worker to run it alone, through the partial index of dispatchable suspects. A paused
-- suspect does not count: run_lock_suspect.sql would not take it, and a worker that closed its
-- intake for it would drain for nothing at every probe.
WITH served AS (  -- _run_served.sql
    SELECT $1::text[] AS contracts, $2::text[] AS projects, $3::text AS version
)
SELECT EXISTS (
    SELECT 1 FROM awooop_run_state AS r
    WHERE suspect_worker_id IS NOT NULL
      AND status IN ('PENDING', 'RESUMED')
      AND (lease_until IS NULL OR lease_until < now())
      AND {{run_served}}  -- $1-$3: the worker's routes and version (it drains only for its own)
      AND NOT {{run_paused}}
)
