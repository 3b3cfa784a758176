-- concurrency.scope_usage: per scope of project $1 (a limit's channel:<type> or
-- contract:<id>), its keys with live runs, the runs executing (holding a slot: _holds_slot.sql)
-- and waiting (PENDING or RESUMED): what a global_max bounds and how many keys
-- concurrency.usage leaves out. Through the keyed runs' index (migration 0132).
SELECT concurrency_scope,
       count(DISTINCT concurrency_key)::int AS keys,
       count(*) FILTER (WHERE {{holds_slot}})::int AS executing,
       count(*) FILTER (WHERE status IN ('PENDING', 'RESUMED'))::int AS waiting
FROM awooop_run_state
WHERE project_id = $1 AND concurrency_key IS NOT NULL
  AND status IN ('PENDING', 'RESUMED', 'RUNNING', 'WAITING_TOOL')
GROUP BY concurrency_scope
ORDER BY concurrency_scope
