-- pauses.listing: the pauses of project $1 (NULL: every project the role sees), active ones
-- only unless $2 (then the history too), newest first, at most $3.
SELECT pause_id, project_id, scope, scope_key, reason, paused_by, paused_at,
       resumed_by, resumed_at
FROM awooop_flow_pauses
WHERE ($1::text IS NULL OR project_id = $1)
  AND ($2 OR resumed_at IS NULL)
ORDER BY paused_at DESC, pause_id
LIMIT $3
