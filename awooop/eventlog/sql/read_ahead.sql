-- read_ahead.read_ahead with no earlier snapshot: every committed event after the relay's cursor
-- ($1, $2), in follower order, at most $3, whatever the follower horizon holds back, and the
-- statement's own snapshot (pg_current_snapshot(): the rows above are what it sees), from which
-- the next read starts. The relay reads this only when the horizon read is caught up, so what
-- lies after the cursor is the tail above the horizon. The LEFT JOIN gives one row (event
-- columns NULL) when nothing is there, to carry the snapshot.
WITH ahead AS (
    SELECT position, tx_id::text::bigint AS tx_id, event_id, stream_id, version, project_id,
           event_type, data::text AS data, metadata, recorded_at
    FROM awooop_events
    WHERE (tx_id, position) > ($1::text::xid8, $2::bigint)
    ORDER BY awooop_events.tx_id, position  -- the column, not the bigint alias: index order
    LIMIT $3
)
SELECT ahead.*, pg_current_snapshot()::text AS snapshot
FROM (SELECT 1) AS one LEFT JOIN ahead ON true
ORDER BY ahead.tx_id, ahead.position
