-- batches.fire_many (awooop.runs.timers.fire_due): TimerFired on each of many runs that the
-- caller's transaction holds locked WAITING_EVENT (run_lock_wait_due.sql) at the version it
-- read ($2), as one statement: in place of a row update per run, the events' insert and the
-- waits' delete. ``heads`` is the stream-head rule (_stream_heads.sql); a run whose head
-- refused is missing from the answer, and the caller raises (its transaction rolls back).
-- ``written`` mirrors state.apply(state, TimerFired): RESUMED, waiting_for cleared, the wait's
-- journal entry ended ("fired" for a sleep, "timeout" for an event wait:
-- awooop.eventlog.wait_state.journaled), version + 1, updated_at = the event's time ($6, the
-- transaction's clock). ``closed`` removes the waits (awooop.eventlog.waits.follow,
-- waits_close.sql). WRITERS.md names the tests that hold the statement equal to apply().
WITH wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::timestamptz[])
        AS w(run_id, expected, step, kind, due_at)
), moves AS (
    SELECT run_id, {{run_stream_id}} AS stream_id, w.expected
    FROM wanted AS w JOIN awooop_run_state AS r USING (run_id)
    WHERE r.version = w.expected AND r.status = 'WAITING_EVENT'
), heads AS (
    {{stream_heads}}
), written AS (
    UPDATE awooop_run_state AS r
    SET status = 'RESUMED', waiting_for = NULL,
        saga_steps = coalesce(r.saga_steps, '{}'::jsonb) || jsonb_build_object(
            w.step,
            CASE WHEN jsonb_typeof(r.saga_steps -> w.step) = 'object'
                 THEN r.saga_steps -> w.step ELSE '{}'::jsonb END
            || jsonb_build_object('ended', CASE WHEN w.kind = 'sleep' THEN 'fired'
                                                ELSE 'timeout' END)),
        version = r.version + 1, updated_at = $6
    FROM heads AS h JOIN wanted AS w USING (run_id)
    WHERE r.run_id = h.run_id
    RETURNING r.*, h.stream_id
), closed AS (
    DELETE FROM awooop_run_waits WHERE run_id IN (SELECT run_id FROM written)
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), x.stream_id, x.version, x.project_id, 'TimerFired',
           jsonb_build_object('type', 'TimerFired', 'at', $6::timestamptz, 'step', w.step,
                              'kind', w.kind, 'due_at', w.due_at),
           $7::text::jsonb
    FROM written AS x JOIN wanted AS w USING (run_id)
    ORDER BY x.run_id
)
SELECT {{run_columns}} FROM written ORDER BY run_id
