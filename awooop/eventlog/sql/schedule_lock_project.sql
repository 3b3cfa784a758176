-- schedules.create: the project's schedules are counted and added one transaction at a time
-- ($1 the project), so that two creates at once cannot both pass the count.
SELECT pg_advisory_xact_lock(hashtextextended('awooop_schedules:' || $1, 0))
