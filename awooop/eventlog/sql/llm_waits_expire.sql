-- llm flow retention: delete at most $2 waits that ended more than $1 seconds ago, oldest
-- first (awooop_llm_waits_ended_idx), each by its row address (a TID scan); rows another
-- transaction holds are skipped. Answers one row per deleted wait.
DELETE FROM awooop_llm_waits
WHERE ctid = ANY (ARRAY(
    SELECT ctid
    FROM awooop_llm_waits
    WHERE ended_at IS NOT NULL AND ended_at < now() - make_interval(secs => $1)
    ORDER BY ended_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))
RETURNING run_id
