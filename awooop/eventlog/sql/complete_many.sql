-- batches.complete_many: the fenced RunCompleted as one statement (autocommit: one round trip,
-- and the transaction id it holds lives for that statement only, so it holds the relay back
-- less). The lock, the fence and the stream heads are _fenced_heads.sql's (RunCompleted is
-- allowed only from RUNNING, as the fence asks).
-- ``written`` mirrors state.apply(state, RunCompleted): COMPLETED, the result, lease and waits
-- cleared, finished_at = updated_at = now(), version + 1 (WRITERS.md names the tests that hold
-- the two equal). A written run comes back by its id alone, a refused one as the snapshot
-- saw it, to say why (_written_answer.sql).
WITH wanted AS (
    SELECT w.*, 1 AS events
    FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[])
        AS w(run_id, worker_id, attempt, result, metadata)
),
{{fenced_heads}}, written AS (
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
{{written_answer}}
