-- Whether the lease of the leased run row ``r`` (awooop_run_state AS r) ran out by the database
-- clock: its own lease_until passed, or its worker holds its leases through a session
-- (awooop_worker_sessions, migration 0161) that ran out. A lease is live while both are
-- (_lease_live.sql is the same rule, negated). The ended sessions are read once per statement
-- (a hashed subplan), not probed per row: a scan of every leased run stays one pass. Rows
-- without a lease (PENDING, RESUMED, the WAITING_* statuses) are judged by lease_until alone
-- where they are tested: no worker session ever covers them.
(r.lease_until < now()
 OR r.worker_id IN (SELECT s.worker_id FROM awooop_worker_sessions AS s
                    WHERE s.lease_until < now()))
