-- pauses.resume: end the active pause of a scope ($1 project, $2 scope, $3 key) as $4 actor.
-- The row stays (the history of pauses); none comes back when the scope was not paused.
UPDATE awooop_flow_pauses
SET resumed_at = now(), resumed_by = $4
WHERE project_id = $1 AND scope = $2 AND scope_key = $3 AND resumed_at IS NULL
RETURNING pause_id, project_id, scope, scope_key, reason, paused_by, paused_at,
          resumed_by, resumed_at
