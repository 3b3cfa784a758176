-- awooop.log.deadletters.note_delivery: what the consumer that gave up knew about the
-- message, on the open dead letter its run's RunFailed just wrote.
UPDATE awooop_dead_letters
SET group_name = $3, source_entry_id = $4, delivery_count = $5, event_type = $6, message = $7
WHERE project_id = $1 AND run_id = $2 AND resolved_at IS NULL
