-- batches.claim_many: the claim transaction as one statement (autocommit: one round trip).
-- The run rows are locked first (SKIP LOCKED, in run_id order, through the primary key).
-- ``heads`` moves the stream head of each locked run to the run's next version by the
-- stream-head rule (_stream_heads.sql); a run whose stream a NEWER transaction wrote is left
-- alone (``conflict``: claiming it would put its event before an earlier version in the
-- relay's order) and is retried by the caller.
-- ``written`` mirrors state.apply(state, RunClaimed): RUNNING, the next attempt, worker_id,
-- lease_until = now() + TTL, heartbeat_at = updated_at = now(), version + 1 (WRITERS.md names
-- the tests that hold the two equal). The runs not claimed come back as the statement's
-- snapshot saw them (no lock), for leases.availability(), with ``paused`` where a pause, its
-- concurrency key at its limit, or its place in the fair order ($5) held back a run that could
-- otherwise be claimed (``held_back``), and ``deferred`` for the last. $6 and $7: the worker's
-- routes, $8 its handler version (_run_served.sql): a run it does not serve, or whose
-- contract requires another version, is answered as the snapshot saw it, ``unserved``; the
-- RunClaimed of a run it claims records the version.
WITH served AS (
    SELECT $6::text[] AS contracts, $7::text[] AS projects, $8::text AS version
), wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::text[]) AS w(run_id, metadata)
), asked AS (
    -- The rows asked for, locked through the primary key (SKIP LOCKED, run_id order); whether
    -- each may be claimed is judged in ``locked`` on the version the lock returns (the newest).
    -- With the status test in this WHERE, the generic plan ANDed the primary key with the
    -- partial index of dispatchable runs and walked that index whole: every pending run, and
    -- every entry left by a claim since the table's last vacuum (4 ms a claim with 3,300
    -- pending runs, against 0.1 ms through the key), so claims slowed as a backlog grew.
    SELECT r.run_id, r.version, r.status, r.lease_until, r.suspect_worker_id,
           r.project_id, r.concurrency_scope, r.concurrency_key, r.concurrency_max,
           r.fair_tag, {{run_paused}} AS paused
    FROM awooop_run_state AS r
    WHERE r.run_id = ANY($1::uuid[])
      AND {{run_served}}  -- a run this worker does not serve is neither locked nor claimed
    ORDER BY r.run_id
    FOR UPDATE SKIP LOCKED
), unserved AS (
    -- The runs asked for that this worker may not take (_run_served.sql), read without a
    -- lock through the primary key: their messages are done with here, and the caller rings
    -- the workers that may take them (awooop.worker.claims).
    SELECT r.run_id FROM awooop_run_state AS r
    WHERE r.run_id = ANY($1::uuid[]) AND NOT {{run_served}}
), ready AS MATERIALIZED (
    SELECT * FROM asked
    WHERE status IN ('PENDING', 'RESUMED')
      AND (lease_until IS NULL OR lease_until < now())
      AND suspect_worker_id IS NULL  -- a suspect runs alone: only the isolated claim takes it
),
{{claim_admission}}, locked AS (
    SELECT run_id, version FROM ready
    WHERE run_id NOT IN (SELECT run_id FROM held_back)
), moves AS (
    SELECT run_id, {{run_stream_id}} AS stream_id, version AS expected, 1 AS events FROM locked
), heads AS (
    {{stream_heads}}
), written AS (
    UPDATE awooop_run_state AS r
    SET status = 'RUNNING', attempt_count = r.attempt_count + 1, worker_id = $3,
        lease_until = now() + make_interval(secs => $4), heartbeat_at = now(),
        version = r.version + 1, updated_at = now()
    FROM heads AS h
    WHERE r.run_id = h.run_id
    RETURNING r.*, h.stream_id
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), c.stream_id, c.version, c.project_id, 'RunClaimed',
           {{run_claimed_data}},
           coalesce(w.metadata, '{}')::jsonb
    FROM written AS c JOIN wanted AS w USING (run_id)
    ORDER BY c.run_id
)
{{batch_answer}}
