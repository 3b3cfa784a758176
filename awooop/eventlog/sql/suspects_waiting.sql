-- suspects.suspects_waiting (the isolated claim's probe): whether a dispatchable suspect waits
-- for a worker to run it alone, through the partial index of dispatchable suspects. A paused
-- suspect does not count: run_lock_suspect.sql would not take it, and a worker that closed its
-- intake for it would drain for nothing at every probe.
WITH served AS (SELECT $1::text[] AS contracts, $2::text[] AS projects)  -- _run_served.sql
SELECT EXISTS (
    SELECT 1 FROM awooop_run_state AS r
    WHERE suspect_worker_id IS NOT NULL
      AND status IN ('PENDING', 'RESUMED')
      AND (lease_until IS NULL OR lease_until < now())
      AND {{run_served}}  -- $1, $2: the worker's routes (it drains only for its own)
      AND NOT {{run_paused}}
)
