-- schedules.get: one schedule of project $1 ($2 its id); FOR UPDATE, so that a pause, resume
-- or delete and a fire of the same schedule take turns.
SELECT * FROM awooop_schedules WHERE project_id = $1 AND schedule_id = $2 FOR UPDATE
