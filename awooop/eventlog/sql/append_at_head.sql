-- eventlog.append_at_head: a producer's own domain events after whatever the stream holds.
-- The head row moves by the number of events whatever its version (concurrent appenders to one
-- stream queue on its row lock), unless the stream's last writer is a newer transaction
-- (_older_head.sql, E-EVENT-002), the transaction's tenant is not the stream's project, or the
-- project is not bound to a producer's login (awooop_tenant_bound, migration 0090; the policy
-- would refuse the row with an error that aborts the caller's transaction): then no row is
-- written at all, so the caller's transaction stays usable.
WITH head AS (
    INSERT INTO awooop_event_streams AS s (stream_id, project_id, version, last_tx_id)
    SELECT $1, $2, cardinality($3::uuid[]), pg_current_xact_id()
    WHERE $2 = current_setting('awooop.project_id', true) AND awooop_tenant_bound($2)
    ON CONFLICT (stream_id) DO UPDATE
        SET version = s.version + cardinality($3::uuid[]), last_tx_id = EXCLUDED.last_tx_id,
            updated_at = now()
        WHERE {{older_head}}
    RETURNING s.version - cardinality($3::uuid[]) AS base
)
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data, metadata)
SELECT e.event_id, $1, head.base + e.ord::int, $2, e.event_type, e.data::jsonb, $6::text::jsonb
FROM head, unnest($3::uuid[], $4::text[], $5::text[]) WITH ORDINALITY AS e(event_id, event_type,
                                                                           data, ord)
ORDER BY e.ord
RETURNING event_id, version, position
