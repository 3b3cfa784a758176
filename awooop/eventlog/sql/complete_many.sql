-- batches.complete_many: the fenced RunCompleted as one statement (autocommit: one round trip,
-- and the transaction id it holds lives for that statement only, so it holds the relay back
-- less). The rows asked for are locked in run_id order (``asked``: the order of
-- run_lock_many.sql); the fence is the WHERE clause of ``locked`` (RUNNING, this worker and
-- attempt, lease not expired by the database clock; RunCompleted is allowed only from RUNNING),
-- and ``heads`` is the stream-head rule (_stream_heads.sql).
-- ``written`` mirrors state.apply(state, RunCompleted): COMPLETED, the result, lease and waits
-- cleared, finished_at = updated_at = now(), version + 1 (WRITERS.md names the tests that hold
-- the two equal). Refused runs come back as the snapshot saw them, to say why.
WITH wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[])
        AS w(run_id, worker_id, attempt, result, metadata)
), asked AS (
    -- Every row asked for, locked through the primary key (run_id order, as
    -- run_lock_many.sql); the fence is checked in ``locked`` on the version the lock returns
    -- (the newest, after a wait). With the fence in this WHERE, the planner took the status
    -- index on statistics that saw no RUNNING row in a large table, and walked every entry the
    -- index's RUNNING part had gathered since the table's last vacuum: 640 pages a completion
    -- at 50M events (ops/bench/growth.py), against 3 through the key.
    SELECT r.run_id, r.version, r.status, r.worker_id, r.attempt_count, r.lease_until
    FROM awooop_run_state AS r
    WHERE r.run_id = ANY($1::uuid[])
    ORDER BY r.run_id
    FOR UPDATE
), held_back AS (
    SELECT run_id FROM asked WHERE false  -- a completion is never held back by a pause
), deferred AS (
    SELECT run_id FROM asked WHERE false  -- nor deferred by the fair order
), unserved AS (
    SELECT run_id FROM asked WHERE false  -- nor refused by routes or handler version
), locked AS (
    SELECT a.run_id, a.version FROM asked AS a JOIN wanted AS w USING (run_id)
    WHERE a.status = 'RUNNING'
      AND a.worker_id = w.worker_id
      AND a.attempt_count = w.attempt
      AND a.lease_until > now()
), moves AS (
    SELECT run_id, {{run_stream_id}} AS stream_id, version AS expected FROM locked
), heads AS (
    {{stream_heads}}
), written AS (
    UPDATE awooop_run_state AS r
    SET status = 'COMPLETED', result = w.result::jsonb, worker_id = NULL, lease_until = NULL,
        heartbeat_at = NULL, finished_at = now(), waiting_for = NULL,
        approval_expires_at = NULL, version = r.version + 1, updated_at = now()
    FROM heads AS h JOIN wanted AS w USING (run_id)
    WHERE r.run_id = h.run_id
    RETURNING r.*, h.stream_id
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), x.stream_id, x.version, x.project_id, 'RunCompleted',
           jsonb_build_object('type', 'RunCompleted', 'at', x.updated_at,
                              'worker_id', w.worker_id, 'attempt', w.attempt,
                              'result', w.result::jsonb),
           coalesce(w.metadata, '{}')::jsonb
    FROM written AS x JOIN wanted AS w USING (run_id)
    ORDER BY x.run_id
)
{{batch_answer}}
