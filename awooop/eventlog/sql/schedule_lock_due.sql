-- schedules.fire: schedule $2 of project $1 when it is still due at $3 and not paused, locked
-- for this fire; SKIP LOCKED: a schedule another loop replica is firing is left to it (it
-- will not be due any more when that replica commits).
SELECT * FROM awooop_schedules
WHERE project_id = $1 AND schedule_id = $2 AND paused_at IS NULL AND due_at <= $3
FOR UPDATE SKIP LOCKED
