-- batches.journal_many: an attempt's journal events (ModelCalled, StepCompleted: a model call
-- and the step it answers, a step's result) as one fenced statement (autocommit: one round
-- trip), for many runs at once, as complete_many.sql writes a completion: the lock, the fence
-- and the stream heads are _fenced_heads.sql's (RUNNING only; the worker writes a run in
-- another leased state, a tool wait, the transactional way: leases.fenced_record_many).
-- $4: each write's events in order, a JSON array of each event as encode_event writes it;
-- ``at``, the database clock, is put in here (now(), the row's updated_at).
-- ``written`` mirrors apply(state, e) folded over the events: version + their number,
-- updated_at = now(), and each StepCompleted's step journaled as {attempt, result} (a later
-- event of the same step wins, as a later apply does); a ModelCalled changes nothing else
-- (WRITERS.md names the tests that hold the two equal). A written run comes back by its id
-- alone, a refused one as the snapshot saw it, to say why (_written_answer.sql).
WITH wanted AS (
    SELECT w.run_id, w.worker_id, w.attempt, w.journal::jsonb AS journal, w.metadata,
           jsonb_array_length(w.journal::jsonb) AS events
    FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[])
        AS w(run_id, worker_id, attempt, journal, metadata)
),
{{fenced_heads}}, written AS (
    -- The steps journaled from each run's own events (a lateral of its row, not a join with
    -- an aggregate of every run's: the planner, which expects one head, ran that once a row).
    UPDATE awooop_run_state AS r
    SET saga_steps = CASE WHEN s.journaled IS NULL THEN r.saga_steps
                          ELSE coalesce(r.saga_steps, '{}'::jsonb) || s.journaled END,
        version = r.version + w.events, updated_at = now()
    FROM heads AS h JOIN wanted AS w USING (run_id)
    CROSS JOIN LATERAL (
        SELECT jsonb_object_agg(e.data->>'step',
                                jsonb_build_object('attempt', e.data->'attempt',
                                                   'result', e.data->'result')
                                ORDER BY e.n) AS journaled
        FROM jsonb_array_elements(w.journal) WITH ORDINALITY AS e(data, n)
        WHERE e.data->>'type' = 'StepCompleted'
    ) AS s
    WHERE r.run_id = h.run_id
    RETURNING r.*, h.stream_id, w.events, w.journal, w.metadata AS event_metadata
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), x.stream_id, x.version - x.events + e.n, x.project_id,
           e.data->>'type', e.data || jsonb_build_object('at', x.updated_at),
           coalesce(x.event_metadata, '{}')::jsonb
    FROM written AS x
    CROSS JOIN LATERAL jsonb_array_elements(x.journal) WITH ORDINALITY AS e(data, n)
    ORDER BY x.run_id, e.n
)
{{written_answer}}
