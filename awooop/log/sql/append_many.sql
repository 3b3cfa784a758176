-- eventlog.append_many: one event on each of many existing streams, each at its expected
-- version, with append.sql's head rule per stream. Streams missing from the answer were refused.
WITH wanted AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::uuid[], $5::text[], $6::text[],
                         $7::text[])
        WITH ORDINALITY AS w(stream_id, expected, project_id, event_id, event_type, data,
                             metadata, ord)
), heads AS (
    UPDATE awooop_event_streams AS s
    SET version = w.expected + 1, last_tx_id = pg_current_xact_id(), updated_at = now()
    FROM wanted AS w
    WHERE s.stream_id = w.stream_id
      AND s.version = w.expected
      AND s.last_tx_id <= pg_current_xact_id()
    RETURNING s.stream_id
)
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data, metadata)
SELECT w.event_id, w.stream_id, w.expected + 1, w.project_id, w.event_type, w.data::jsonb,
       w.metadata::jsonb
FROM wanted AS w JOIN heads USING (stream_id)
ORDER BY w.ord
RETURNING stream_id, position
