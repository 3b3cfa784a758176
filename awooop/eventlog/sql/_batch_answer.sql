-- The answer of a one-statement batch write (claim_many.sql, complete_many.sql): each run
-- ``written`` as it was written, then every other run asked for ($1) as the statement's
-- snapshot saw it (no lock), with ``conflict`` where it was ``locked`` but the stream-head rule
-- refused it (a newer transaction wrote its stream: the caller tries again), ``paused`` where
-- the statement's ``held_back`` kept it (a claim a pause refused), ``deferred`` where that was
-- its place in the fair order, ``unserved`` where the worker may not take it (its routes or
-- handler version, _run_served.sql); ``db_now``, the database clock, on every row;
-- ``lease_seen``, an unwritten run's lease as the rule sees it (_run_lease_until.sql: its
-- worker's session too), on which the caller judges who holds it.
SELECT {{run_columns}},
       true AS written, false AS conflict, false AS paused, false AS deferred,
       false AS unserved, now() AS db_now, lease_until AS lease_seen
FROM written
UNION ALL
SELECT {{run_columns}},
       false, run_id IN (SELECT run_id FROM locked),
       run_id IN (SELECT run_id FROM held_back), run_id IN (SELECT run_id FROM deferred),
       run_id IN (SELECT run_id FROM unserved), now(), {{run_lease_until}}
FROM awooop_run_state AS r
WHERE run_id = ANY($1::uuid[]) AND run_id NOT IN (SELECT run_id FROM heads)
