-- concurrency.usage: per key of project $1 (NULL: all), the runs executing (holding a slot:
-- _holds_slot.sql), the runs waiting (PENDING or RESUMED), the key's
-- maximum (the newest run's) and when its oldest waiting run was queued; the $2 keys with the
-- most runs waiting, then executing. Through the keyed runs' index (migration 0132).
SELECT project_id, concurrency_scope, concurrency_key,
       count(*) FILTER (WHERE {{holds_slot}})::int AS executing,
       count(*) FILTER (WHERE status IN ('PENDING', 'RESUMED'))::int AS waiting,
       (array_agg(concurrency_max ORDER BY created_at DESC))[1] AS max,
       min(created_at) FILTER (WHERE status IN ('PENDING', 'RESUMED')) AS oldest_waiting_at
FROM awooop_run_state
WHERE concurrency_key IS NOT NULL
  AND status IN ('PENDING', 'RESUMED', 'RUNNING', 'WAITING_TOOL')
  AND ($1::text IS NULL OR project_id = $1)
GROUP BY project_id, concurrency_scope, concurrency_key
ORDER BY waiting DESC, executing DESC, project_id, concurrency_key
LIMIT $2
