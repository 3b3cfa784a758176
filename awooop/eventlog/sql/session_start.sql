-- sessions.start (migration 0161): a worker's session begins, before its first claim, and
-- again after the last one ran out ($3: that one's start; NULL the first time). Answers the
-- session's start and whether the worker id had a session before (an earlier process that used
-- this id, or this one's session that ran out): the runs that session still holds are given up
-- next (run_lock_earlier_session.sql), so the new session never keeps them alive. A first start
-- takes the id over; a start again takes it only from its own session or one that ran out, never
-- from a live session of a later process that uses the same id (no row is answered then).
-- Sessions that ran out a day ago are pruned here: no run's own lease outlives its session by
-- more than AWOOOP_RUN_LEASE_TTL_S.
WITH earlier AS (
    SELECT 1 FROM awooop_worker_sessions WHERE worker_id = $1
), pruned AS (
    DELETE FROM awooop_worker_sessions
    WHERE lease_until < now() - interval '1 day' AND worker_id <> $1
)
INSERT INTO awooop_worker_sessions AS s (worker_id, lease_until)
VALUES ($1, clock_timestamp() + make_interval(secs => $2))
ON CONFLICT (worker_id) DO UPDATE
SET lease_until = EXCLUDED.lease_until, started_at = clock_timestamp(),
    renewed_at = clock_timestamp()
WHERE $3::timestamptz IS NULL OR s.started_at = $3 OR s.lease_until <= clock_timestamp()
RETURNING s.started_at, EXISTS (SELECT 1 FROM earlier) AS again
