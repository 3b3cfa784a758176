-- ingest depth.check_depth: the runs of project $1 queued (PENDING or RESUMED) per key of $2,
-- through the keyed runs' index (migration 0132); keys without one are left out.
SELECT concurrency_key, count(*)::int AS queued
FROM awooop_run_state
WHERE project_id = $1 AND concurrency_key IS NOT NULL AND concurrency_key = ANY($2::text[])
  AND status IN ('PENDING', 'RESUMED')
GROUP BY concurrency_key
