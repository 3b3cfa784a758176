-- schedules.listing: the schedules of project $1 (NULL: of every project the role sees), in
-- the order they were created, at most $2.
SELECT * FROM awooop_schedules
WHERE $1::text IS NULL OR project_id = $1
ORDER BY project_id, created_at, schedule_id
LIMIT $2
