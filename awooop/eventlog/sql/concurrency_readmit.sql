-- concurrency.readmit: may an attempt whose tool call answered continue now (project $1,
-- scope $2, key $3, at most $4 executing)? Run in the transaction that writes its
-- WAITING_TOOL -> RUNNING transition, with the run's row locked. It waits for the key's lock
-- (the only one it takes; a claim that holds a key's lock never waits for a run row: claims
-- lock rows SKIP LOCKED), so no cycle of waits can form.
SELECT awooop_concurrency_admit($1, $2, $3, $4, true)
