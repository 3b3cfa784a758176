-- The heart of the stream-head rule: the head ``s`` (an awooop_event_streams row) was last
-- written by an older transaction, or by this one. The relay follows the log by transaction
-- id, so a newer writer's events must never come before an older one's: a statement that
-- moves a head moves it only where this holds, and writes nothing where it does not
-- (E-EVENT-002).
s.last_tx_id <= pg_current_xact_id()
