-- schedules.delete: schedule $2 of project $1 is gone (its runs stay, with their keys).
DELETE FROM awooop_schedules WHERE project_id = $1 AND schedule_id = $2 RETURNING *
