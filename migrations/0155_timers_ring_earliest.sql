-- awooop: online
-- phase: expand
--
-- A new wait rings the timers loop only when it comes due before every other open wait.
--
-- The loop always wakes by the earliest open wait's due time (+ AWOOOP_TIMER_GRACE_S): it
-- reads that time in each iteration (awooop.runs.timers.next_due_in) and hears each ring of a
-- sooner one. A wait due at or after an open wait adds no earlier wake, so its ring woke the
-- loop for nothing, and every NOTIFY wakes every listening backend of the database (the
-- relay's, the workers' and the loop's) to read the queue. A burst of 1,000 sleeps of the same
-- length rang 1,000 / batch times; now it rings once (measured with ops/bench/sleeps.py: the
-- sleep burst's Postgres and worker CPU per run fall by about a tenth).
--
-- The earlier open wait is looked for on the partial index of due times, from the earliest:
-- the first row not written by this statement ends the probe. A wait this statement cannot
-- see (another transaction's, not yet committed, or another tenant's under row-level
-- security) counts as absent, so the rule can only ring more, never less, than it should;
-- the one case it rings less: an earlier wait whose own transaction commits after the loop's
-- look ahead; then the loop's poll (AWOOOP_TIMER_POLL_INTERVAL_S) finds this one, as it finds
-- any wait whose ring was lost. Signals ring as before.
CREATE OR REPLACE FUNCTION awooop_notify_timers() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    v_due timestamptz;
BEGIN
    IF TG_TABLE_NAME = 'awooop_signals' THEN
        IF EXISTS (SELECT 1 FROM inserted WHERE pending) THEN
            PERFORM pg_notify('awooop_timers', 'signal');
        END IF;
    ELSE
        SELECT min(due_at) INTO v_due FROM inserted;
        IF v_due IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM awooop_run_waits AS w
            WHERE w.due_at <= v_due
              AND NOT EXISTS (SELECT 1 FROM inserted AS i WHERE i.run_id = w.run_id)
        ) THEN
            PERFORM pg_notify('awooop_timers', extract(epoch FROM v_due - now())::text);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
