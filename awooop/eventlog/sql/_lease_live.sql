-- Whether the lease of the leased run row ``r`` (awooop_run_state AS r) is live by the database
-- clock: its own lease_until and, when its worker holds its leases through a session
-- (awooop_worker_sessions, migration 0161), that session's (_lease_expired.sql says why). For
-- the few rows of a fenced write: one probe of the sessions' key per row (a scalar subquery,
-- which the planner cannot turn into a join that reads every session).
(r.lease_until > now()
 AND coalesce((SELECT s.lease_until > now() FROM awooop_worker_sessions AS s
                WHERE s.worker_id = r.worker_id), true))
