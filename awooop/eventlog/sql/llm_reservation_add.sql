-- llm flow: the reservation of call $3 of attempt $2 of run $1 on model scope $4: $8 of unit
-- $9 on the counter ($5 project, $4, $9, $6 period_s, $7 period start).
INSERT INTO awooop_llm_reservations
    (run_id, attempt, seq, model, project_id, period_s, period_start, reserved, unit)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT DO NOTHING
