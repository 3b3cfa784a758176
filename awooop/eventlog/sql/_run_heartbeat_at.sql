-- When the worker holding the run row ``r`` (awooop_run_state AS r) last renewed its lease:
-- the run's own heartbeat_at, or its worker's session's last renewal (migration 0161) if
-- later. For reads that report a run's liveness (the reaper's reasons, blocked_on); the
-- session is not renewed on the run's row. One probe of the sessions' key.
greatest(r.heartbeat_at, (SELECT s.renewed_at FROM awooop_worker_sessions AS s
                          WHERE s.worker_id = r.worker_id))
