-- waits.follow: the open waits that WaitStarted events began (one per run), in the transaction
-- that wrote them.
INSERT INTO awooop_run_waits (run_id, project_id, step, kind, name, match, due_at, started_at)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
                     $7::timestamptz[], $8::timestamptz[])
