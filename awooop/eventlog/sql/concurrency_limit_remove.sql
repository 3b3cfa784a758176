-- concurrency.remove_limit: drop the limit of a scope ($1 project, $2 scope, $3 key). Runs
-- queued under it keep their key (and its maximum) until they end.
DELETE FROM awooop_concurrency_limits
WHERE project_id = $1 AND scope = $2 AND scope_key = $3
RETURNING project_id, scope, scope_key, key_expr, max_expr, global_max, depth_cap, set_by,
          set_at
