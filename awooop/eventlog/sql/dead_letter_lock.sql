-- awooop.eventlog.deadletters.get_for_update: one dead letter, locked (a re-drive holds it).
SELECT * FROM awooop_dead_letters WHERE dead_letter_id = $1 FOR UPDATE
