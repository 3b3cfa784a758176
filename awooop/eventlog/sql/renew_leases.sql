-- runs.renew_leases (R-12): one statement renews every live lease of a worker. No event: the
-- lease clock (lease_until, heartbeat_at of a leased run) is the only part of the row that is
-- not apply() folded over the events, with the step the attempt is in (current_step*,
-- migration 0127), which rides on the same statement so that a step costs no write of its own.
WITH asked AS (
    -- The rows asked for, locked through the primary key alone (run_id order, as
    -- run_lock_many.sql), and judged in ``live`` on the version the lock returns. With the
    -- tests in the UPDATE's WHERE, the generic plan read the partial index of leased runs
    -- (claim_many.sql says why that walks every entry it gathered since the table's last
    -- vacuum).
    SELECT run_id, worker_id, attempt_count, status, lease_until, saga_steps
    FROM awooop_run_state
    WHERE run_id = ANY($2::uuid[])
    ORDER BY run_id
    FOR NO KEY UPDATE
), live AS (
    -- Fenced by worker AND attempt ($4, in the order of $2): a renewal sent for an earlier
    -- attempt of this worker never renews a later one. Judged on the clock after the lock
    -- (clock_timestamp(), not the statement's start): a renewal that waited behind a lock
    -- cannot revive a lease that ran out meanwhile. A step already journaled (its
    -- StepCompleted committed while this renewal was on its way) is no longer current.
    -- (CASE evaluates saga_steps only for an attempt that is in a step.)
    SELECT a.run_id, w.attempt,
           CASE WHEN w.step IS NULL OR a.saga_steps ? w.step THEN NULL ELSE w.step END
               AS step,
           CASE WHEN w.step IS NULL OR a.saga_steps ? w.step THEN NULL ELSE w.started_at END
               AS started_at
    FROM asked AS a
    JOIN unnest($2::uuid[], $4::int[], $5::text[], $6::timestamptz[])
        AS w (run_id, attempt, step, started_at) ON w.run_id = a.run_id
    WHERE a.worker_id = $1
      AND a.attempt_count = w.attempt
      AND a.status IN ('RUNNING', 'WAITING_TOOL')
      AND a.lease_until > clock_timestamp()
      -- nor one whose worker session (migration 0161) ran out: that worker starts a new one
      AND NOT EXISTS (SELECT 1 FROM awooop_worker_sessions AS s
                      WHERE s.worker_id = $1 AND s.lease_until <= clock_timestamp())
)
UPDATE awooop_run_state AS r
-- Never backwards: a renewal that arrives late (it waited behind a lock) keeps a later lease.
SET lease_until = greatest(r.lease_until, clock_timestamp() + make_interval(secs => $3)),
    heartbeat_at = greatest(r.heartbeat_at, clock_timestamp()),
    current_step = l.step,
    current_step_started_at = l.started_at,
    current_step_attempt = l.attempt
FROM live AS l
WHERE r.run_id = l.run_id
RETURNING r.run_id
