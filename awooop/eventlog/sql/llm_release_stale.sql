-- llm flow: release the open reservations of a counter ($1 project, $2 model scope,
-- $3 period_s, $4 period start, $5 unit) whose attempt no longer holds its run's lease (a
-- crashed or stopped attempt: its call was never recorded, so it is not charged), and take
-- them off the counter. Answers the counter as it is then.
WITH stale AS (
    UPDATE awooop_llm_reservations r
    SET state = 'released', settled_at = now()
    WHERE r.project_id = $1 AND r.model = $2 AND r.period_s = $3 AND r.period_start = $4
      AND r.unit = $5 AND r.state = 'reserved'
      AND NOT EXISTS (
          SELECT 1 FROM awooop_run_state rs
          WHERE rs.run_id = r.run_id AND rs.attempt_count = r.attempt
            AND rs.status IN ('RUNNING', 'WAITING_TOOL') AND rs.lease_until > now()
      )
    RETURNING r.reserved
)
UPDATE awooop_llm_budget_usage u
SET reserved = u.reserved - (SELECT coalesce(sum(reserved), 0) FROM stale)
WHERE u.project_id = $1 AND u.model = $2 AND u.unit = $5 AND u.period_s = $3
  AND u.period_start = $4
RETURNING u.used, u.reserved, (SELECT count(*) FROM stale) AS released
