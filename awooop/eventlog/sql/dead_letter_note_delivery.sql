-- awooop.eventlog.deadletters.note_delivery: what the consumer that gave up knew about the
-- message, on the open dead letter its run's RunFailed just wrote.
UPDATE awooop_dead_letters
SET group_name = $2, source_entry_id = $3, delivery_count = $4, event_type = $5, message = $6
WHERE run_id = $1 AND resolved_at IS NULL
