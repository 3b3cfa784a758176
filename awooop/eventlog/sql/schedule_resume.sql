-- schedules.resume: paused schedule $2 of project $1 fires again from its first fire time
-- after the resume ($3) and that time's due moment ($4): nothing fires for the paused time.
UPDATE awooop_schedules
SET paused_at = NULL, paused_by = NULL, next_fire_at = $3, due_at = $4, updated_at = now()
WHERE project_id = $1 AND schedule_id = $2 AND paused_at IS NOT NULL
RETURNING *
