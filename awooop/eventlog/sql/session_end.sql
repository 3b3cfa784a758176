-- sessions.end (migration 0161): a worker that stops ends its session, so that a run it did
-- not give back (its release failed) runs out now rather than with its own lease.
UPDATE awooop_worker_sessions SET lease_until = least(lease_until, clock_timestamp())
WHERE worker_id = $1 AND started_at = $2
