-- Whether a worker whose handler runs version ``s.version`` (the ``served`` row of
-- _run_served.sql) may take the run row ``r``: the run's contract requires no handler version
-- in its project (awooop_handler_versions, migration 0140; awooop.runs.versions), or requires
-- versions among which is this one. NULL: the statement claims nothing that it runs (the
-- reaper's requeue): no test. One probe of the table's primary key; a run without a contract
-- requires nothing.
(s.version IS NULL
 OR NOT EXISTS (
     SELECT 1 FROM awooop_handler_versions AS v
     WHERE v.project_id = r.project_id AND v.contract_id = r.contract_id
       AND NOT s.version = ANY (v.versions)))
