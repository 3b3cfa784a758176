-- Whether the run row ``r`` (awooop_run_state AS r) is paused: an active pause of its project,
-- its channel or its contract (awooop_flow_pauses, migration 0130; awooop.runs.pauses). Every
-- claim statement tests it on the row it locks, so a paused run is never claimed, on any
-- worker, from the moment the pause commits. One probe of the active pauses' index.
EXISTS (
    SELECT 1 FROM awooop_flow_pauses AS p
    WHERE p.project_id = r.project_id
      AND p.resumed_at IS NULL
      AND (p.scope = 'project'
           OR (p.scope = 'channel' AND p.scope_key = r.channel_type)
           OR (p.scope = 'contract' AND p.scope_key = r.contract_id))
)
