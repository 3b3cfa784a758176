-- llm flow retention: delete at most $2 reservations settled or released more than $1 seconds
-- ago, oldest first (awooop_llm_reservations_finished_idx), each by its row address (a TID
-- scan, whatever the table's size); rows another transaction holds are skipped. Answers one
-- row per deleted reservation.
DELETE FROM awooop_llm_reservations
WHERE ctid = ANY (ARRAY(
    SELECT ctid
    FROM awooop_llm_reservations
    WHERE state <> 'reserved' AND settled_at < now() - make_interval(secs => $1)
    ORDER BY settled_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))
RETURNING run_id
