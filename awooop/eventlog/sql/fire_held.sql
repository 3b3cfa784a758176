-- batches.fire_held (awooop.runs.timers.fire_held): TimerFired on the runs $1 that a worker
-- left sleeping at the versions $2 (awooop.worker.local_timers), as ONE statement in its own
-- transaction: each run is locked, and fired only if it is still WAITING_EVENT at that version
-- (a row another transaction holds, the timers loop firing it, a signal, a cancel, is skipped,
-- and one changed since is left out: no longer this worker's to fire) and its wait is due by
-- the statement's clock. The rest is fire_many.sql's (_fire_written.sql), at the statement's
-- clock, with the metadata $3. Every
-- change of a run's wait moves its version under the run's row lock, so the waits read here
-- are the ones written at the versions locked.
WITH asked AS (
    -- Locked through the primary key alone (as claim_many.sql's ``asked``): with the status
    -- test here, the generic plan walked the index of WAITING_EVENT runs, every sleeping run
    -- of the table per statement. Whether each is still this worker's to fire is judged on
    -- the version the lock returns (the newest).
    SELECT r.run_id, r.version, r.status
    FROM awooop_run_state AS r
    WHERE r.run_id = ANY($1::uuid[])
    ORDER BY r.run_id
    FOR UPDATE SKIP LOCKED
), locked AS (
    SELECT a.run_id, a.version
    FROM asked AS a JOIN unnest($1::uuid[], $2::int[]) AS h(run_id, version)
        ON h.run_id = a.run_id AND h.version = a.version
    WHERE a.status = 'WAITING_EVENT'
), wanted AS (
    SELECT l.run_id, l.version AS expected, w.step, w.kind, w.due_at
    FROM locked AS l JOIN awooop_run_waits AS w USING (run_id)
    WHERE w.due_at <= now()
), fire_at AS (
    SELECT now() AS at, $3::text::jsonb AS metadata
), {{fire_written}}
