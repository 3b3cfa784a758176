-- signal retention (awooop.runs.signal_retention): delete at most $2 signals, delivered or not,
-- whose run ended more than $1 seconds ago, the oldest end first (awooop_signals_finished_idx),
-- each by its row address (a TID scan); rows another transaction holds are skipped. Answers one
-- row per deleted signal.
DELETE FROM awooop_signals
WHERE ctid = ANY (ARRAY(
    SELECT ctid
    FROM awooop_signals
    WHERE run_ended_at IS NOT NULL
      AND run_ended_at < now() - make_interval(secs => $1)
    ORDER BY run_ended_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))
RETURNING signal_id
