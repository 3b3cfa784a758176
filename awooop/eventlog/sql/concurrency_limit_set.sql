-- concurrency.set_limit: the limit of a scope ($1 project, $2 'channel' or 'contract', $3 the
-- channel type or contract id), made or replaced. Intake reads it (its configuration cache
-- keeps a read briefly); queued runs keep the key and maximum they were given.
INSERT INTO awooop_concurrency_limits
    (project_id, scope, scope_key, key_expr, max_expr, global_max, depth_cap, set_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (project_id, scope, scope_key) DO UPDATE
SET key_expr = EXCLUDED.key_expr, max_expr = EXCLUDED.max_expr,
    global_max = EXCLUDED.global_max, depth_cap = EXCLUDED.depth_cap,
    set_by = EXCLUDED.set_by, set_at = now()
RETURNING project_id, scope, scope_key, key_expr, max_expr, global_max, depth_cap, set_by,
          set_at
