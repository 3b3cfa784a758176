-- Suspects: runs that were in flight on a worker when it died, to be run alone.
--
-- A worker whose lease expired while it held several runs cannot tell Postgres which of them
-- killed it. Each of those runs is requeued as a suspect (RunRequeued with suspect = true):
-- the death is not charged to it, and it runs alone on a worker from then on, so that a death
-- while it runs alone is its own (awooop.runs.leases.rules.reap_event, docs/workers.md).
--
-- suspect_worker_id: the worker whose death, while it held other runs too, made the run a
-- suspect (apply(state, RunRequeued(suspect=True)) sets it; nothing clears it). Nullable and
-- without a default rewrite: existing rows read NULL, which is what replay folds from events
-- written before the field existed, and code that does not know the column still runs.
ALTER TABLE awooop_run_state ADD COLUMN suspect_worker_id text;
ALTER TABLE awooop_run_state_view ADD COLUMN suspect_worker_id text;

-- The isolation claim: dispatchable suspects, oldest first. Only suspects are in it.
CREATE INDEX awooop_run_state_suspects_idx ON awooop_run_state (created_at)
    WHERE suspect_worker_id IS NOT NULL AND status IN ('PENDING', 'RESUMED');

-- The reap decision: did the dead worker's death make other runs suspects already (the runs
-- of one dead worker are reaped one by one, by whichever process finds each first).
CREATE INDEX awooop_run_state_suspect_worker_idx ON awooop_run_state (suspect_worker_id)
    WHERE suspect_worker_id IS NOT NULL;
