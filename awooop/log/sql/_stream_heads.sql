-- The stream-head rule, for each row of ``moves`` (stream_id, expected, and whatever else the
-- caller wants back): the head moves to expected + 1 only where it is at ``expected`` and was
-- last written by an older (or this) transaction. The relay follows the log by transaction id,
-- so a newer writer's events must never come before an older one's. Answers the moves whose
-- head moved (m.*); a move missing from the answer was refused.
UPDATE awooop_event_streams AS s
SET version = m.expected + 1, last_tx_id = pg_current_xact_id(), updated_at = now()
FROM moves AS m
WHERE s.stream_id = m.stream_id
  AND s.version = m.expected
  AND s.last_tx_id <= pg_current_xact_id()
RETURNING m.*
