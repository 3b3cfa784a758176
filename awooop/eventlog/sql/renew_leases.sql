-- runs.renew_leases (R-12): one statement renews every live lease of a worker. No event: the
-- lease clock (lease_until, heartbeat_at of a leased run) is the only part of the row that is
-- not apply() folded over the events.
WITH asked AS (
    -- The rows asked for, locked through the primary key alone (run_id order, as
    -- run_lock_many.sql), and judged in ``live`` on the version the lock returns. With the
    -- tests in the UPDATE's WHERE, the generic plan read the partial index of leased runs
    -- (claim_many.sql says why that walks every entry it gathered since the table's last
    -- vacuum).
    SELECT run_id, worker_id, attempt_count, status, lease_until FROM awooop_run_state
    WHERE run_id = ANY($2::uuid[])
    ORDER BY run_id
    FOR NO KEY UPDATE
), live AS (
    -- Fenced by worker AND attempt ($4, in the order of $2): a renewal sent for an earlier
    -- attempt of this worker never renews a later one. Judged on the clock after the lock
    -- (clock_timestamp(), not the statement's start): a renewal that waited behind a lock
    -- cannot revive a lease that ran out meanwhile.
    SELECT a.run_id FROM asked AS a
    JOIN unnest($2::uuid[], $4::int[]) AS w (run_id, attempt) ON w.run_id = a.run_id
    WHERE a.worker_id = $1
      AND a.attempt_count = w.attempt
      AND a.status IN ('RUNNING', 'WAITING_TOOL')
      AND a.lease_until > clock_timestamp()
)
UPDATE awooop_run_state AS r
-- Never backwards: a renewal that arrives late (it waited behind a lock) keeps a later lease.
SET lease_until = greatest(r.lease_until, clock_timestamp() + make_interval(secs => $3)),
    heartbeat_at = greatest(r.heartbeat_at, clock_timestamp())
FROM live AS l
WHERE r.run_id = l.run_id
RETURNING r.run_id
