-- What fire_many.sql and fire_held.sql share after their ``wanted`` (run_id, expected, step,
-- kind, due_at: the runs WAITING_EVENT at ``expected`` whose wait to end is ``step``) and
-- ``fire_at`` (at: the events' time, metadata) CTEs: apply(state, TimerFired) in SQL on each
-- (RESUMED, waiting_for cleared, the wait's journal entry ended: "fired" for a sleep,
-- "timeout" for an event wait; version + 1, updated_at = at), the stream heads moved by the
-- stream-head rule (_stream_heads.sql: a run whose head refused is missing from the answer),
-- the waits' rows removed, the events appended. Answers the written runs' rows.
moves AS (
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
           jsonb_build_object('type', 'TimerFired', 'at', (SELECT at FROM fire_at),
                              'step', w.step, 'kind', w.kind, 'due_at', w.due_at),
           (SELECT metadata FROM fire_at)
    FROM written AS x JOIN wanted AS w USING (run_id)
    ORDER BY x.run_id
)
SELECT {{run_columns}} FROM written ORDER BY run_id
