-- The existing dedupe row of each key $3 of project $1 and channel $2 that decides it now
-- (``d``: provider_event_id, run_id, expires_at): the newest in the current or next dedupe
-- window, or one not expired in an older window back to the TTL $4 (migrations/
-- 0112_partitioned_dedupe.sql says why a key has rows in two windows). One backward probe of
-- the primary key per key, pruned to the TTL's windows. LIMIT 1 keeps the lateral subquery
-- from being flattened into a join that the planner, on stale statistics (a table that grew
-- since its last ANALYZE), turns into a scan of the whole project and channel filtered by the
-- keys: O(table) per delivery, O(table x batch) per batch. tests/integration/
-- test_ingest_store.py checks the pages touched.
FROM unnest($3::text[]) AS k(provider_event_id)
CROSS JOIN LATERAL (
    SELECT e.provider_event_id, e.run_id, e.expires_at
    FROM awooop_channel_event_dedupe e
    WHERE e.project_id = $1 AND e.channel_type = $2 AND e.provider_event_id = k.provider_event_id
      AND e.window_start >= awooop_dedupe_window(now() - make_interval(secs => $4::float8))
      AND e.window_start <= awooop_dedupe_window(now()) + interval '7 days'
      AND (e.window_start >= awooop_dedupe_window(now()) OR e.expires_at > now())
    ORDER BY e.window_start DESC
    LIMIT 1
) AS d
