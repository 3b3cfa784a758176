-- awooop: online
-- phase: expand
--
-- awooop_stream_of_project (migration 0115) with its body stored parsed (a SQL-standard
-- body, PostgreSQL 14 or later), the same expression.
--
-- The CHECKs of awooop_events (every partition) and awooop_event_streams call it, and
-- Postgres prepares a table's CHECK expressions once per statement that writes the table,
-- inlining the function into them. A body kept as text was parsed and analysed again at each
-- of those: every claim, journal write, completion and submit, once per table it writes (a
-- profile of a journal statement of one run: 5 % of its Postgres CPU; ops/bench/journal
-- statements of 1 run against 64). Stored parsed, the inlining reads the tree. Nothing else
-- changes: the same rule, IMMUTABLE, inlined as before.
CREATE OR REPLACE FUNCTION awooop_stream_of_project(stream_id text, project_id text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN starts_with(stream_id, 'run-') THEN
        stream_id LIKE 'run-________-____-____-____-____________'
    WHEN starts_with(stream_id, 'domain/') THEN
        starts_with(stream_id, 'domain/' || project_id || '/')
        AND length(stream_id) > length(project_id) + 8
    WHEN starts_with(stream_id, 'revision-') THEN
        starts_with(stream_id, 'revision-' || project_id || '/')
        AND length(stream_id) > length(project_id) + 10
    ELSE false
END;
