-- When the lease of the run row ``r`` (awooop_run_state AS r) runs out by the rule of
-- _lease_live.sql: the earlier of its own lease_until and its worker's session's (migration
-- 0161), NULL without a lease. For reads that answer a run's lease (a peek, a fence check); a
-- statement that writes the row keeps lease_until itself. One probe of the sessions' key.
CASE WHEN r.lease_until IS NULL THEN NULL
     ELSE least(r.lease_until, (SELECT s.lease_until FROM awooop_worker_sessions AS s
                                WHERE s.worker_id = r.worker_id))
END
