-- output retention (output_log.expire_once, in the dedupe_expiry loop): delete at most $2 rows
-- of streamed output written more than $1 seconds ago, oldest first (awooop_run_output_age_idx),
-- each by its row address (a TID scan, whatever the table's size); rows another transaction
-- holds are skipped. Answers one row per deleted row.
DELETE FROM awooop_run_output
WHERE ctid = ANY (ARRAY(
    SELECT ctid
    FROM awooop_run_output
    WHERE created_at < now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))
RETURNING run_id
