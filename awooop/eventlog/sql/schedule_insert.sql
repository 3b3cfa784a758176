-- schedules.create: a new schedule of project $2, checked by awooop.schedules.rules.define,
-- with its first fire time ($11) and due moment ($12), unless the project already has $14
-- schedules (no row then). The caller holds the project's lock (schedule_lock_project.sql).
INSERT INTO awooop_schedules (
    schedule_id, project_id, cron, timezone, contract_id, input, catch_up, catch_up_window_s,
    overlap, jitter_s, next_fire_at, due_at, created_by
)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13
WHERE (SELECT count(*) FROM awooop_schedules WHERE project_id = $2) < $14
RETURNING *
