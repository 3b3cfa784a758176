-- llm flow: settle the reservation of call $3 of attempt $2 of run $1 on model scope $4 to
-- $5 used, in the reservation's unit (tokens or credits), in the transaction of the call's
-- ModelCalled event: the counter loses the reservation (unless it was released meanwhile)
-- and gains the use. Settling twice is a no-op.
WITH old AS (
    SELECT project_id, model, unit, period_s, period_start, reserved, state
    FROM awooop_llm_reservations
    WHERE run_id = $1 AND attempt = $2 AND seq = $3 AND model = $4 AND state <> 'settled'
    FOR UPDATE
), done AS (
    UPDATE awooop_llm_reservations r
    SET state = 'settled', used = $5, settled_at = now()
    FROM old
    WHERE r.run_id = $1 AND r.attempt = $2 AND r.seq = $3 AND r.model = $4
    RETURNING r.run_id
)
UPDATE awooop_llm_budget_usage u
SET reserved = u.reserved - CASE WHEN old.state = 'reserved' THEN old.reserved ELSE 0 END,
    used = u.used + $5,
    calls = u.calls + 1
FROM old
WHERE u.project_id = old.project_id AND u.model = old.model AND u.unit = old.unit
  AND u.period_s = old.period_s
  AND u.period_start = old.period_start AND EXISTS (SELECT 1 FROM done)
RETURNING u.used, u.reserved
