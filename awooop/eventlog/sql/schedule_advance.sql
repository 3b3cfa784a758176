-- schedules.fire: the schedule moves on to its next fire time ($3) and due moment ($4), by
-- compare-and-swap on the fire time it was fired from ($2): no row when another transaction
-- moved it first (the caller then rolls back everything this fire wrote). $5 the last fire
-- time started or passed (NULL: none), $6 the schedule's last run, $7 what the fire did, $8
-- the runs it started, $9 the fire times it did not start.
UPDATE awooop_schedules
SET next_fire_at = $3,
    due_at = $4,
    last_fire_at = coalesce($5, last_fire_at),
    last_run_id = $6,
    last_outcome = coalesce($7, last_outcome),
    fires = fires + $8,
    skipped = skipped + $9,
    updated_at = now()
WHERE schedule_id = $1 AND next_fire_at = $2
RETURNING *
