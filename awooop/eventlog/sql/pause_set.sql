-- pauses.pause: the active pause of a scope ($1 project, $2 scope, $3 key), made with $4
-- reason and $5 actor when there is none (``created``), else the one there is (its reason and
-- author unchanged). The active pauses' unique index makes a second pause of a scope a no-op.
WITH made AS (
    INSERT INTO awooop_flow_pauses (project_id, scope, scope_key, reason, paused_by)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (project_id, scope, scope_key) WHERE resumed_at IS NULL DO NOTHING
    RETURNING pause_id, project_id, scope, scope_key, reason, paused_by, paused_at,
              resumed_by, resumed_at
)
SELECT *, true AS created FROM made
UNION ALL
SELECT pause_id, project_id, scope, scope_key, reason, paused_by, paused_at,
       resumed_by, resumed_at, false
FROM awooop_flow_pauses
WHERE project_id = $1 AND scope = $2 AND scope_key = $3 AND resumed_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM made)
