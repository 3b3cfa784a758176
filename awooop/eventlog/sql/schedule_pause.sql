-- schedules.pause: schedule $2 of project $1 fires nothing from now on ($3 who paused it); a
-- schedule already paused keeps its first pause.
UPDATE awooop_schedules
SET paused_at = coalesce(paused_at, now()),
    paused_by = coalesce(paused_by, $3),
    updated_at = now()
WHERE project_id = $1 AND schedule_id = $2
RETURNING *
