-- The fence and the stream heads of a one-statement fenced write for many runs
-- (complete_many.sql, sleep_many.sql, journal_many.sql), after the caller's ``wanted``
-- (run_id, worker_id, attempt, events: how many events the write appends, ...). ``asked``:
-- every row asked for, locked through the primary key (run_id order, as run_lock_many.sql);
-- the fence is checked in ``locked`` on the version the lock returns (the newest, after a
-- wait): RUNNING, this worker and attempt, lease live by the database clock (_lease_live.sql
-- is evaluated in ``asked``, which reads the row it locks). With the
-- fence in ``asked``'s WHERE, the planner took the status index on statistics that saw no
-- RUNNING row in a large table, and walked every entry the index's RUNNING part had gathered
-- since the table's last vacuum: 640 pages a completion at 50M events (ops/bench/growth.py),
-- against 3 through the key. A fenced write is never held back by a pause, deferred by the
-- fair order or refused by routes or handler version: those answers (_batch_answer.sql) are
-- empty. ``heads`` is the stream-head rule (_stream_heads.sql).
asked AS (
    SELECT r.run_id, r.version, r.status, r.worker_id, r.attempt_count,
           {{lease_live}} AS live
    FROM awooop_run_state AS r
    WHERE r.run_id = ANY($1::uuid[])
    ORDER BY r.run_id
    FOR UPDATE
), held_back AS (
    SELECT run_id FROM asked WHERE false
), deferred AS (
    SELECT run_id FROM asked WHERE false
), unserved AS (
    SELECT run_id FROM asked WHERE false
), locked AS (
    SELECT a.run_id, a.version, w.events FROM asked AS a JOIN wanted AS w USING (run_id)
    WHERE a.status = 'RUNNING'
      AND a.worker_id = w.worker_id
      AND a.attempt_count = w.attempt
      AND a.live
), moves AS (
    SELECT run_id, {{run_stream_id}} AS stream_id, version AS expected, events FROM locked
), heads AS (
    {{stream_heads}}
)
