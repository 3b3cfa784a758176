-- awooop: online
-- phase: expand
--
-- The retention of undelivered signals of finished runs (docs/workers.md, Waiting for an
-- event): a signal no wait took stays in awooop_signals while its run lives; once the run has
-- finished it can never be delivered, and the dedupe_expiry loop deletes it
-- AWOOOP_SIGNAL_RETENTION_S after the run's end (awooop.runs.signal_retention).
--
-- - awooop_signals.run_ended_at: when the signal's run finished (NULL while it lives, and for
--   a delivered signal). Set by a trigger on awooop_run_state, for the undelivered signals of
--   a run whose status becomes COMPLETED, FAILED or CANCELLED, in the transaction of that
--   change, whichever path writes it (the event write path, the one-statement completion of
--   complete_many.sql, bulk operations); cleared again when a FAILED run is retried. The
--   trigger fires only on such a change (its WHEN clause): every other update of a run row
--   pays nothing. A producer's pending signal committed after its run finished is marked by
--   the timers loop, which looks at every pending signal (awooop.runs.signals.deliver_pending).
-- - awooop_signals_ended_idx: exactly the rows the retention may delete, oldest end first, so
--   a pass costs the rows it deletes however many signals live runs keep.
-- - A producer login inserts signals only with run_ended_at NULL.
--
-- Online: a nullable column without a default (catalog only), the index built CONCURRENTLY,
-- the trigger and the policy each in a short transaction (lock_timeout). The previous release
-- neither reads nor writes the column; its runs' ends are marked by the trigger as well.
ALTER TABLE awooop_signals ADD COLUMN run_ended_at timestamptz;

CREATE INDEX CONCURRENTLY awooop_signals_ended_idx ON awooop_signals (run_ended_at)
    WHERE delivered_at IS NULL AND run_ended_at IS NOT NULL;

CREATE FUNCTION awooop_signals_follow_run_end() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    UPDATE awooop_signals
    SET run_ended_at = CASE WHEN NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN now() END
    WHERE run_id = NEW.run_id AND delivered_at IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER awooop_run_state_signals_end
    AFTER UPDATE OF status ON awooop_run_state
    FOR EACH ROW
    WHEN ((OLD.status IN ('COMPLETED', 'FAILED', 'CANCELLED'))
          IS DISTINCT FROM (NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED')))
    EXECUTE FUNCTION awooop_signals_follow_run_end();

CREATE POLICY producer_writes_live ON awooop_signals AS RESTRICTIVE FOR INSERT TO awooop_producer
    WITH CHECK (run_ended_at IS NULL);
