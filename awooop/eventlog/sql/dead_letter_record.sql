-- awooop.eventlog.deadletters.record: one dead letter; a duplicate of the same occurrence (the
-- occurrence index, or the one-open-row-per-run/per-entry indexes) inserts nothing.
INSERT INTO awooop_dead_letters (
    project_id, run_id, run_version, source, group_name, source_entry_id, delivery_count,
    event_type, code, reason, message
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT DO NOTHING
RETURNING dead_letter_id
