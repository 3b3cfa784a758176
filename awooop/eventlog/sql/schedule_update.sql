-- schedules.update: schedule $2 of project $1 takes a new definition ($3..$10: cron, time zone,
-- contract, input, catch-up, catch-up window in seconds, overlap, jitter in seconds) and fire
-- time ($11, due moment $12). The caller holds the row (schedule_get.sql, FOR UPDATE), so a
-- fire of the old definition either committed before or finds the fire time moved and rolls
-- back (schedule_advance.sql's compare-and-swap).
UPDATE awooop_schedules
SET cron = $3,
    timezone = $4,
    contract_id = $5,
    input = $6,
    catch_up = $7,
    catch_up_window_s = $8,
    overlap = $9,
    jitter_s = $10,
    next_fire_at = $11,
    due_at = $12,
    updated_at = now()
WHERE project_id = $1 AND schedule_id = $2
RETURNING *
