-- The data of the TimerFired event that ends the wait ``w`` (step, kind, due_at) at the time
-- ``at``: _fire_written.sql and fire_claim.sql write it.
jsonb_build_object('type', 'TimerFired', 'at', at,
                   'step', w.step, 'kind', w.kind, 'due_at', w.due_at)
