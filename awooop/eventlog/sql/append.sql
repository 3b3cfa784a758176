-- eventlog.append: events at an expected version of one stream (R-30). Creates the stream head,
-- or moves it only if it is at $3 and was last written by an older transaction
-- (_older_head.sql), then inserts the events; no row back means refused (the caller explains
-- why).
WITH head AS (
    INSERT INTO awooop_event_streams AS s (stream_id, project_id, version, last_tx_id)
    VALUES ($1, $2, $3::int + cardinality($4::uuid[]), pg_current_xact_id())
    ON CONFLICT (stream_id) DO UPDATE
        SET version = EXCLUDED.version, last_tx_id = EXCLUDED.last_tx_id, updated_at = now()
        WHERE s.version = $3::int AND {{older_head}}
    RETURNING s.version
)
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data, metadata)
SELECT e.event_id, $1, $3::int + e.ord::int, $2, e.event_type, e.data::jsonb, e.metadata::jsonb
FROM head, unnest($4::uuid[], $5::text[], $6::text[], $7::text[])
    WITH ORDINALITY AS e(event_id, event_type, data, metadata, ord)
RETURNING position
