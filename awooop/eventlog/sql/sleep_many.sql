-- batches.sleep_many: a sleep's fenced WaitStarted as one statement (autocommit: one round
-- trip), for many runs at once, as complete_many.sql writes a completion: the lock, the fence
-- and the stream heads are _fenced_heads.sql's (WaitStarted is allowed only from RUNNING, as
-- the fence asks). A run refused writes nothing.
-- ``due``: the sleep's due time, $6 (sleep_until) or the database clock + $5 microseconds,
-- and its text as Python's datetime.isoformat() writes it in UTC (microseconds left out when
-- there are none): the event carries that text and the journal keeps it.
-- ``written`` mirrors state.apply(state, WaitStarted) of a sleep: WAITING_EVENT, waiting for
-- "sleep", the lease released, the wait journaled under its step
-- (awooop.eventlog.wait_state.journaled), version + 1, updated_at = now() (WRITERS.md names
-- the tests that hold the two equal). ``waited`` is the wait's row (awooop.eventlog.waits
-- .follow, waits_open.sql); its insert trigger (migration 0141) rings the timers loop with
-- the earliest due time. Refused runs come back as the snapshot saw them, to say why.
WITH wanted AS (
    SELECT w.*, 1 AS events
    FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::bigint[],
                $6::timestamptz[], $7::text[])
        AS w(run_id, worker_id, attempt, step, delay_us, until, metadata)
),
{{fenced_heads}}, due AS (
    SELECT h.run_id, h.stream_id, w.worker_id, w.attempt, w.step, w.metadata, d.due_at,
           to_char(d.due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || CASE WHEN date_trunc('second', d.due_at) = d.due_at THEN ''
                   ELSE to_char(d.due_at AT TIME ZONE 'UTC', '.US') END
           || '+00:00' AS due_text
    FROM heads AS h JOIN wanted AS w USING (run_id)
    CROSS JOIN LATERAL (
        SELECT coalesce(w.until, now() + w.delay_us * interval '1 microsecond') AS due_at
    ) AS d
), written AS (
    UPDATE awooop_run_state AS r
    SET status = 'WAITING_EVENT', worker_id = NULL, lease_until = NULL, heartbeat_at = NULL,
        waiting_for = 'sleep',
        saga_steps = coalesce(r.saga_steps, '{}'::jsonb) || jsonb_build_object(
            d.step, jsonb_build_object('attempt', d.attempt, 'kind', 'sleep',
                                       'due_at', d.due_text, 'result', NULL)),
        version = r.version + 1, updated_at = now()
    FROM due AS d
    WHERE r.run_id = d.run_id
    RETURNING r.*
), waited AS (
    INSERT INTO awooop_run_waits (run_id, project_id, step, kind, due_at, started_at)
    SELECT x.run_id, x.project_id, d.step, 'sleep', d.due_at, x.updated_at
    FROM written AS x JOIN due AS d USING (run_id)
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), d.stream_id, x.version, x.project_id, 'WaitStarted',
           jsonb_build_object('type', 'WaitStarted', 'at', x.updated_at,
                              'worker_id', d.worker_id, 'attempt', d.attempt,
                              'step', d.step, 'kind', 'sleep', 'due_at', d.due_text),
           coalesce(d.metadata, '{}')::jsonb
    FROM written AS x JOIN due AS d USING (run_id)
    ORDER BY x.run_id
)
{{batch_answer}}
