-- batches.fire_claim (awooop.worker.local_timers): a worker's own sleeps that came due, fired
-- AND claimed by that worker in ONE statement of its own (autocommit: one round trip), in
-- place of a TimerFired statement and then a claim. $1 the runs, each at the version $2 the
-- worker left it sleeping at; $3 the worker, $4 the lease's TTL, $5 the fair share's switch,
-- $6-$8 what the worker serves (_run_served.sql), $9 the events' metadata.
-- ``asked`` locks the rows through the primary key alone (SKIP LOCKED, run_id order, as
-- claim_many.sql's: with the status test there, the generic plan walked the index of waiting
-- runs). ``due``: those still WAITING_EVENT at the version named, their wait due by the
-- statement's clock (a row another transaction holds, the timers loop firing it, a signal, a
-- cancel, is skipped, and one changed since is left out: no longer this worker's to fire).
-- ``ready``: those the worker may claim (served, not suspect), admitted as claim_many.sql's
-- are (_claim_admission.sql: a pause, a full concurrency key, the fair order hold one back).
-- Each run of ``due`` gets apply(state, TimerFired) and, when claimed, apply(state,
-- RunClaimed) on top: two events, the stream head moving by two (_stream_heads.sql), the row
-- RUNNING with this worker's lease; one held back is left RESUMED, as the timers loop leaves
-- it, for the stream's delivery to claim. Both events are at the statement's clock. Answers
-- the written rows with ``claimed``; a run missing from the answer was not fired here.
-- WRITERS.md names the tests that hold the statement equal to apply().
WITH served AS (
    SELECT $6::text[] AS contracts, $7::text[] AS projects, $8::text AS version
), asked AS (
    SELECT r.run_id, r.version, r.status, r.suspect_worker_id,
           r.project_id, r.concurrency_scope, r.concurrency_key, r.concurrency_max,
           r.fair_tag, {{run_paused}} AS paused, {{run_served}} AS serves
    FROM awooop_run_state AS r
    WHERE r.run_id = ANY($1::uuid[])
    ORDER BY r.run_id
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT a.*, w.step, w.kind, w.due_at
    FROM asked AS a
    JOIN unnest($1::uuid[], $2::int[]) AS h(run_id, version)
        ON h.run_id = a.run_id AND h.version = a.version
    JOIN awooop_run_waits AS w ON w.run_id = a.run_id
    WHERE a.status = 'WAITING_EVENT' AND w.due_at <= now()
), ready AS MATERIALIZED (
    SELECT * FROM due WHERE serves AND suspect_worker_id IS NULL
),
{{claim_admission}}, moves AS (
    SELECT d.run_id, {{run_stream_id}} AS stream_id, d.version AS expected,
           CASE WHEN d.run_id IN (SELECT run_id FROM ready)
                     AND d.run_id NOT IN (SELECT run_id FROM held_back)
                THEN 2 ELSE 1 END AS events
    FROM due AS d
), heads AS (
    {{stream_heads}}
), written AS (
    UPDATE awooop_run_state AS r
    SET status = CASE WHEN h.events = 2 THEN 'RUNNING' ELSE 'RESUMED' END,
        waiting_for = NULL,
        saga_steps = {{fired_steps}},
        attempt_count = r.attempt_count + h.events - 1,
        worker_id = CASE WHEN h.events = 2 THEN $3 ELSE r.worker_id END,
        lease_until = CASE WHEN h.events = 2 THEN now() + make_interval(secs => $4)
                           ELSE r.lease_until END,
        heartbeat_at = CASE WHEN h.events = 2 THEN now() ELSE r.heartbeat_at END,
        version = r.version + h.events, updated_at = now()
    FROM heads AS h JOIN due AS w USING (run_id)
    WHERE r.run_id = h.run_id
    RETURNING r.*, h.stream_id, h.events
), closed AS (
    DELETE FROM awooop_run_waits WHERE run_id IN (SELECT run_id FROM written)
), appended AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT gen_random_uuid(), e.stream_id, e.version, e.project_id, e.event_type, e.data,
           $9::text::jsonb
    FROM (
        SELECT x.run_id, x.stream_id, x.version - x.events + 1 AS version, x.project_id,
               'TimerFired' AS event_type, {{timer_fired_data}} AS data
        FROM written AS x JOIN due AS w USING (run_id) CROSS JOIN (SELECT now() AS at) AS f
        UNION ALL
        SELECT c.run_id, c.stream_id, c.version, c.project_id, 'RunClaimed',
               {{run_claimed_data}}
        FROM written AS c WHERE c.events = 2
    ) AS e
    ORDER BY e.run_id, e.version
)
SELECT {{run_columns}}, events = 2 AS claimed FROM written ORDER BY run_id
