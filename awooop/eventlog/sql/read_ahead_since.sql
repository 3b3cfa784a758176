-- read_ahead.read_ahead after an earlier read: only the rows that earlier read's snapshot could
-- not see yet, i.e. of transactions it listed as in progress ($3, its xip list) or that started
-- at or after its xmax, after the relay's cursor ($1, $2), at most $6, with this statement's
-- snapshot. ($4, $5) is the greater of the cursor and (xmax, 0), computed by the caller: one row
-- comparison is the index scan's start (with both a row comparison and a plain tx_id bound,
-- the btree started at the row comparison, the cursor, and walked the whole tail: 773 buffers
-- for 80 rows behind 200,000; 6 buffers with the one start). Both parts are ranges of the
-- follower index (tx_id, position), so a read costs what committed since the last one (plus the
-- index entries of the transactions still in progress), never the whole tail behind a long
-- transaction again. The two parts are disjoint (every xip entry is below xmax).
WITH ahead AS (
    SELECT * FROM (
        SELECT position, tx_id, event_id, stream_id, version, project_id, event_type,
               data::text AS data, metadata, recorded_at
        FROM awooop_events
        WHERE tx_id = ANY ($3::text[]::xid8[])
          AND (tx_id, position) > ($1::text::xid8, $2::bigint)
        UNION ALL
        SELECT position, tx_id, event_id, stream_id, version, project_id, event_type,
               data::text AS data, metadata, recorded_at
        FROM awooop_events
        WHERE (tx_id, position) > ($4::text::xid8, $5::bigint)
    ) AS rows
    ORDER BY rows.tx_id, rows.position
    LIMIT $6
)
SELECT ahead.position, ahead.tx_id::text::bigint AS tx_id, ahead.event_id, ahead.stream_id,
       ahead.version, ahead.project_id, ahead.event_type, ahead.data, ahead.metadata,
       ahead.recorded_at, pg_current_snapshot()::text AS snapshot
FROM (SELECT 1) AS one LEFT JOIN ahead ON true
ORDER BY ahead.tx_id, ahead.position
