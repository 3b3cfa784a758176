-- The data of the RunClaimed event of the claimed run row ``c`` (as written: its worker_id,
-- attempt_count, lease_until, updated_at), the handler version of ``served``
-- (_run_served.sql): claim_many.sql and fire_claim.sql write it.
jsonb_build_object('type', 'RunClaimed', 'at', c.updated_at,
                   'worker_id', c.worker_id, 'attempt', c.attempt_count,
                   'lease_until', c.lease_until,
                   'handler_version', (SELECT version FROM served))
