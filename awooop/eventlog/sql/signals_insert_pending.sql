-- signals.send_pending: the producer's signal row, pending delivery by the timers loop. The payload
-- ($6) is JSON text encoded in Python, so the statement needs no JSON codec of the connection (a
-- producer's own connection may have none, or its own, or be another driver's). A repeat of the
-- key writes nothing and returns no row.
INSERT INTO awooop_signals
    (signal_id, project_id, run_id, name, signal_key, payload, sent_by, pending)
VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7, true)
ON CONFLICT (run_id, signal_key) DO NOTHING
RETURNING signal_id
