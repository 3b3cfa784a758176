-- The answer of a one-statement fenced write whose caller reads no row back (complete_many.sql,
-- journal_many.sql: the worker only needs to know that its write was made): each run
-- ``written`` named by ``answered`` alone, every column of the row NULL (reading the row back
-- cost the worker more CPU than the rest of its part of the write); then every other run
-- asked for ($1) as the statement's snapshot saw it, to say why it was refused, with
-- ``conflict`` where it was ``locked`` but the stream-head rule refused it (a newer
-- transaction wrote its stream: the caller tries again); ``db_now``, the database clock, on
-- every row.
SELECT x.answered, true AS written, false AS conflict, now() AS db_now, {{run_columns}}
FROM (SELECT run_id AS answered FROM written) AS x
CROSS JOIN (SELECT (NULL::awooop_run_state).*) AS nothing
UNION ALL
SELECT run_id, false, run_id IN (SELECT run_id FROM locked), now(), {{run_columns}}
FROM awooop_run_state
WHERE run_id = ANY($1::uuid[]) AND run_id NOT IN (SELECT run_id FROM heads)
