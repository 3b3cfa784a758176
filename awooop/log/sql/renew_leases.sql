-- runs.renew_leases (R-12): one statement renews every live lease of a worker. No event: the
-- lease clock (lease_until, heartbeat_at of a leased run) is the only part of the row that is
-- not apply() folded over the events.
UPDATE awooop_run_state
SET lease_until = now() + make_interval(secs => $3), heartbeat_at = now()
WHERE worker_id = $1
  AND run_id = ANY($2::uuid[])
  AND status IN ('RUNNING', 'WAITING_TOOL')
  AND lease_until > now()
RETURNING run_id
