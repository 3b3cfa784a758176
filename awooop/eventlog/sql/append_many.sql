-- eventlog.append_many: one event on each of many existing streams, each at its expected
-- version, by the stream-head rule (_stream_heads.sql). Streams missing from the answer were
-- refused.
WITH wanted AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::uuid[], $5::text[], $6::text[],
                         $7::text[])
        WITH ORDINALITY AS w(stream_id, expected, project_id, event_id, event_type, data,
                             metadata, ord)
), moves AS (
    SELECT stream_id, expected, 1 AS events FROM wanted
), heads AS (
    {{stream_heads}}
)
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data, metadata)
SELECT w.event_id, w.stream_id, w.expected + 1, w.project_id, w.event_type, w.data::jsonb,
       w.metadata::jsonb
FROM wanted AS w JOIN heads USING (stream_id)
ORDER BY w.ord
RETURNING stream_id, position
