-- eventlog.append_many when a stream takes several events: each stream's events in order, at
-- consecutive expected versions (the first at the stream's version), by the stream-head rule
-- (_older_head.sql) with the head moved past all of them. Streams missing from the answer
-- were refused.
WITH wanted AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::uuid[], $5::text[], $6::text[],
                         $7::text[])
        WITH ORDINALITY AS w(stream_id, expected, project_id, event_id, event_type, data,
                             metadata, ord)
), moves AS (
    SELECT stream_id, min(expected) AS expected, count(*)::int AS n
    FROM wanted GROUP BY stream_id
), heads AS (
    UPDATE awooop_event_streams AS s
    SET version = m.expected + m.n, last_tx_id = pg_current_xact_id(), updated_at = now()
    FROM moves AS m
    WHERE s.stream_id = m.stream_id
      AND s.version = m.expected
      AND {{older_head}}
    RETURNING m.stream_id
)
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data, metadata)
SELECT w.event_id, w.stream_id, w.expected + 1, w.project_id, w.event_type, w.data::jsonb,
       w.metadata::jsonb
FROM wanted AS w JOIN heads USING (stream_id)
ORDER BY w.ord
RETURNING stream_id, position
