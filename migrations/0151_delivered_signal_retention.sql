-- awooop: online
-- phase: expand
--
-- Delivered signals go with the retention too. A delivered signal's payload, key and sender
-- are in the run's events (SignalDelivered, or the StepCompleted of a wait that took it at
-- once, its metadata naming the signal), which are the run's record; the row in
-- awooop_signals only answers a repeat of its key while the run can still wait. Kept for ever,
-- the table grew with every signal ever sent. From this migration a run's end marks all its
-- signals (the trigger of 0144 marked the undelivered ones only), and the dedupe_expiry loop
-- deletes every marked signal AWOOOP_SIGNAL_RETENTION_S after the end
-- (awooop.runs.signal_retention). A repeat of a deleted signal's key to its finished run is
-- refused (E-SIGNAL-002), as for an undelivered one.
--
-- - awooop_signals_finished_idx: every signal of a finished run, oldest end first (the rows
--   the retention may delete). awooop_signals_ended_idx (0144, undelivered ones only) is read
--   by the previous release's retention; a contract migration drops it.
-- - The trigger's function marks and unmarks every signal of the run.
-- - The delivered signals of runs that finished before this migration are marked, in batches.
--
-- Online: the index is built CONCURRENTLY; the function is replaced in a short transaction;
-- the marking is a batch that changes only unmarked rows (safe to run again). The previous
-- release's retention still deletes only undelivered signals; the marks it does not read.
CREATE INDEX CONCURRENTLY awooop_signals_finished_idx ON awooop_signals (run_ended_at)
    WHERE run_ended_at IS NOT NULL;

CREATE OR REPLACE FUNCTION awooop_signals_follow_run_end() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    UPDATE awooop_signals
    SET run_ended_at = CASE WHEN NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN now() END
    WHERE run_id = NEW.run_id;
    RETURN NULL;
END
$$;

UPDATE awooop_signals
SET run_ended_at = now()
WHERE ctid = ANY (ARRAY(
    SELECT s.ctid
    FROM awooop_signals s
    JOIN awooop_run_state r ON r.run_id = s.run_id
    WHERE s.run_ended_at IS NULL
      AND s.delivered_at IS NOT NULL
      AND r.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
    LIMIT $1
));
