-- The stream-head rule for the events of a statement on each of many existing streams, the rows
-- of ``moves`` (stream_id, expected, events: how many this statement appends there, and
-- whatever else the caller wants back): a head moves to expected + events only where it is at
-- ``expected`` and _older_head.sql holds. Answers the moves whose head moved (m.*); a move
-- missing from the answer was refused.
UPDATE awooop_event_streams AS s
SET version = m.expected + m.events, last_tx_id = pg_current_xact_id(), updated_at = now()
FROM moves AS m
WHERE s.stream_id = m.stream_id
  AND s.version = m.expected
  AND {{older_head}}
RETURNING m.*
