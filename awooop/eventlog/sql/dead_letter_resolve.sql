-- awooop.eventlog.deadletters.resolve: close one open dead letter (false: gone or closed already).
UPDATE awooop_dead_letters
SET resolved_at = now(), resolution = $2, resolved_by = $3
WHERE dead_letter_id = $1 AND resolved_at IS NULL
RETURNING dead_letter_id
