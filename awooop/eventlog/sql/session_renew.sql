-- sessions.renew (migration 0161): one row renews every lease the worker holds through its
-- session. Only a session that has not run out, by the clock after the lock, and only this
-- process's ($3: its start): a stalled worker cannot revive leases others may have taken,
-- and a later process with the same id has replaced it. No row answered: the session is lost.
UPDATE awooop_worker_sessions
SET lease_until = greatest(lease_until, clock_timestamp() + make_interval(secs => $2)),
    renewed_at = clock_timestamp()
WHERE worker_id = $1 AND started_at = $3 AND lease_until > clock_timestamp()
RETURNING lease_until
