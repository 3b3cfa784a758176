-- awooop.eventlog.deadletters.get: one dead letter.
SELECT * FROM awooop_dead_letters WHERE dead_letter_id = $1
