-- batches.fire_many (awooop.runs.timers.fire_due): TimerFired on each of many runs that the
-- caller's transaction holds locked WAITING_EVENT (run_lock_wait_due.sql) at the version it
-- read ($2), as one statement: in place of a row update per run, the events' insert and the
-- waits' delete. ``heads`` is the stream-head rule (_stream_heads.sql); a run whose head
-- refused is missing from the answer, and the caller raises (its transaction rolls back).
-- ``written`` mirrors state.apply(state, TimerFired): RESUMED, waiting_for cleared, the
-- wait's journal entry ended (_fired_steps.sql), version + 1, updated_at = the event's time
-- (the transaction's clock $6). ``closed`` removes the waits (awooop.eventlog.waits.follow,
-- waits_close.sql). WRITERS.md names the tests that hold the statement equal to apply().
WITH wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::timestamptz[])
        AS w(run_id, expected, step, kind, due_at)
), fire_at AS (
    SELECT $6::timestamptz AS at, $7::text::jsonb AS metadata
), moves AS (
    SELECT run_id, {{run_stream_id}} AS stream_id, w.expected, 1 AS events
    FROM wanted AS w JOIN awooop_run_state AS r USING (run_id)
    WHERE r.version = w.expected AND r.status = 'WAITING_EVENT'
), heads AS (
    {{stream_heads}}
), written AS (
    UPDATE awooop_run_state AS r
    SET status = 'RESUMED', waiting_for = NULL,
        saga_steps = {{fired_steps}},
        version = r.version + 1, updated_at = (SELECT at FROM fire_at)
    FROM heads AS h JOIN wanted AS w USING (run_id)
    WHERE r.run_id = h.run_id
    RETURNING r.*, h.stream_id
), closed AS (
    DELETE FROM awooop_run_waits WHERE run_id IN (SELECT run_id FROM written)
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), x.stream_id, x.version, x.project_id, 'TimerFired',
           {{timer_fired_data}}, f.metadata
    FROM written AS x JOIN wanted AS w USING (run_id) CROSS JOIN fire_at AS f
    ORDER BY x.run_id
)
SELECT {{run_columns}} FROM written ORDER BY run_id
