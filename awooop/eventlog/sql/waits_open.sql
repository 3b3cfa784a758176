-- waits.follow: the open waits that WaitStarted events began (one per run), in the transaction
-- that wrote them; a wait for child runs with its children (a JSON array of run ids, given as
-- its text: an array parameter cannot hold arrays) and how many of them must finish
-- (migration 0145).
INSERT INTO awooop_run_waits
    (run_id, project_id, step, kind, name, match, due_at, started_at, children, needed)
SELECT w.run_id, w.project_id, w.step, w.kind, w.name, w.match, w.due_at, w.started_at,
       w.children::jsonb, w.needed
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
            $7::timestamptz[], $8::timestamptz[], $9::text[], $10::int[])
    AS w(run_id, project_id, step, kind, name, match, due_at, started_at, children, needed)
