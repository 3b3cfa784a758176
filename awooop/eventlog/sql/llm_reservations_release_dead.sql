-- llm flow retention: release at most $2 open reservations made more than $1 seconds ago in
-- a period that has ended, whose attempt no longer holds its run's lease (a crashed attempt
-- whose reservation no refused call swept: its call was never recorded, so it is not
-- charged), and take them off their counters. The open reservations are few (the calls in
-- flight): awooop_llm_reservations_open_idx holds them all; each is then updated by its row
-- address (a TID scan). Answers the number released.
WITH dead AS (
    SELECT r.ctid AS addr
    FROM awooop_llm_reservations r
    WHERE r.state = 'reserved' AND r.reserved_at < now() - make_interval(secs => $1)
      AND r.period_start + make_interval(secs => r.period_s) < now()
      AND NOT EXISTS (
          SELECT 1 FROM awooop_run_state rs
          WHERE rs.run_id = r.run_id AND rs.attempt_count = r.attempt
            AND rs.status IN ('RUNNING', 'WAITING_TOOL') AND rs.lease_until > now()
      )
    ORDER BY r.reserved_at
    LIMIT $2
    FOR UPDATE OF r SKIP LOCKED
), released AS (
    UPDATE awooop_llm_reservations r
    SET state = 'released', settled_at = now()
    WHERE r.ctid = ANY (ARRAY(SELECT addr FROM dead))
    RETURNING r.project_id, r.model, r.unit, r.period_s, r.period_start, r.reserved
), counters AS (
    UPDATE awooop_llm_budget_usage u
    SET reserved = u.reserved - x.total
    FROM (
        SELECT project_id, model, unit, period_s, period_start, sum(reserved) AS total
        FROM released GROUP BY 1, 2, 3, 4, 5
    ) x
    WHERE u.project_id = x.project_id AND u.model = x.model AND u.unit = x.unit
      AND u.period_s = x.period_s AND u.period_start = x.period_start
    RETURNING 1
)
SELECT (SELECT count(*) FROM released) AS released, (SELECT count(*) FROM counters) AS counters
