-- runs.renew_leases (R-12): one statement renews every live lease of a worker. No event: the
-- lease clock (lease_until, heartbeat_at of a leased run) is the only part of the row that is
-- not apply() folded over the events.
WITH asked AS (
    -- The rows asked for, locked through the primary key alone (run_id order, as LOCK_MANY),
    -- and judged in ``live`` on the version the lock returns. With the tests in the UPDATE's
    -- WHERE, the generic plan read the partial index of leased runs (claim_many.sql says why
    -- that walks every entry it gathered since the table's last vacuum).
    SELECT run_id, worker_id, status, lease_until FROM awooop_run_state
    WHERE run_id = ANY($2::uuid[])
    ORDER BY run_id
    FOR NO KEY UPDATE
), live AS (
    SELECT run_id FROM asked
    WHERE worker_id = $1
      AND status IN ('RUNNING', 'WAITING_TOOL')
      AND lease_until > now()
)
UPDATE awooop_run_state AS r
SET lease_until = now() + make_interval(secs => $3), heartbeat_at = now()
FROM live AS l
WHERE r.run_id = l.run_id
RETURNING r.run_id
