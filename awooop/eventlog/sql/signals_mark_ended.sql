-- signals.deliver_pending: the undelivered signals of runs found finished ($1) that are not yet
-- marked (a producer's pending signal committed after its run's end, which the trigger of
-- migration 0142 did not see), marked now, so the retention deletes them.
UPDATE awooop_signals SET run_ended_at = now()
WHERE run_id = ANY($1::uuid[]) AND delivered_at IS NULL AND run_ended_at IS NULL
