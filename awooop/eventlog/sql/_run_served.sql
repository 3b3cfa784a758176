-- Whether the worker that runs the statement serves the run row ``r`` (awooop_run_state AS r):
-- its routes (awooop.runs.routing; `awooop worker --contract C --project P`) and its handler
-- version are the one row of the relation ``served`` that the statement defines from two
-- text[] parameters, NULL meaning every one, and one text parameter, the version
-- (_run_version_accepted.sql). A run without a contract is served only by a worker without
-- --contract. Every claim statement tests it on the row it locks, so no worker claims a run it
-- does not serve, or whose contract requires another handler version, on any path.
EXISTS (
    SELECT 1 FROM served AS s
    WHERE (s.contracts IS NULL OR r.contract_id = ANY (s.contracts))
      AND (s.projects IS NULL OR r.project_id = ANY (s.projects))
      AND {{run_version_accepted}}
)
