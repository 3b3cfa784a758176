-- awooop: online
-- phase: expand
--
-- The leased runs indexed by worker instead of by lease_until, so that a lease renewal is a
-- HOT update.
--
-- A renewal (renew_leases.sql, every AWOOOP_HEARTBEAT_INTERVAL_S for every lease a worker
-- holds) writes lease_until, heartbeat_at and the attempt's current step. lease_until was the
-- key of awooop_run_state_leased_idx, so every renewed row was a new version with an entry in
-- each of the table's 17 indexes (the trigram index of the run's input among them), for vacuum
-- to remove later: about 35 µs of Postgres CPU and 1 KB of WAL per lease per renewal
-- (ops/bench/lease_renewal.py). With no index on any column a renewal writes, it is HOT (the
-- new version on the same page, no index entry; the table keeps 30 % of each page for that):
-- about a fifth of the CPU and a sixth of the WAL.
--
-- The new index has the old one's predicate, so every query that read the old one (the
-- reaper's and the polling path's expired leases, oldest first; the doctor's and the stats'
-- counts) reads this one, in this release and the previous one alike: it gives the leased runs,
-- whose lease_until is then compared row by row. Their number is bounded by the runs in flight
-- and each such scan is one of the reaper (every AWOOOP_REAPER_INTERVAL_S) or of a worker poll
-- with free slots; renewals are many times more frequent.
--
-- Online: built CONCURRENTLY (claims, writes and renewals go on), then the old index dropped
-- CONCURRENTLY. No statement of either release names an index.
CREATE INDEX CONCURRENTLY awooop_run_state_leased_worker_idx
    ON awooop_run_state (worker_id) WHERE status IN ('RUNNING', 'WAITING_TOOL');
DROP INDEX CONCURRENTLY IF EXISTS awooop_run_state_leased_idx;
