-- sessions.start: up to $3 runs that an earlier session of worker id $1 still holds (leased,
-- claimed or renewed before the new session started at $2), locked, read through the leased
-- runs' index by worker (migration 0158). Waits for a lock rather than skipping it: a row
-- left here would stay live under the new session.
SELECT {{run_columns}}, now() AS db_now, {{run_heartbeat_at}} AS heartbeat_seen
FROM awooop_run_state AS r
WHERE worker_id = $1
  AND status IN ('RUNNING', 'WAITING_TOOL')
  AND heartbeat_at < $2
ORDER BY run_id
LIMIT $3
FOR UPDATE
