-- run_reads.LOCK_FAIR (leases.poll, first): dispatchable runs that have waited at least $1
-- seconds, in the fair order between projects (start tags, migrations/0134_fair_share.sql), at
-- most $2, among the first $3 waiting runs of that order: the walk stays bounded however many
-- paused or full-key runs wait at its head (run_lock_dispatchable.sql, taken after this one,
-- takes runs in arrival order past them, and the runs without a tag). Skipped like there:
-- suspects, paused runs (_run_paused.sql), runs whose concurrency key is full
-- (_run_admitted.sql; admissions are asked in this order, so only up to the runs taken).
WITH served AS (  -- _run_served.sql
    SELECT $4::text[] AS contracts, $5::text[] AS projects, $6::text AS version
)
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state AS r
WHERE status IN ('PENDING', 'RESUMED')
  AND fair_tag IS NOT NULL
  AND fair_tag <= coalesce(
      (SELECT w.fair_tag FROM awooop_run_state AS w
       WHERE w.status IN ('PENDING', 'RESUMED') AND w.fair_tag IS NOT NULL
       ORDER BY w.fair_tag, w.created_at
       OFFSET $3 LIMIT 1),
      'Infinity')
  AND (lease_until IS NULL OR lease_until < now())
  AND updated_at <= now() - make_interval(secs => $1)
  AND suspect_worker_id IS NULL
  AND {{run_served}}  -- $4-$6: the worker's routes and version (the window above is everyone's)
  AND NOT {{run_paused}}
  AND {{run_admitted}}
ORDER BY fair_tag, created_at
LIMIT $2
FOR UPDATE SKIP LOCKED
