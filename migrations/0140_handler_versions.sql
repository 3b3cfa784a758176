-- phase: expand
--
-- Handler versions (awooop.runs.versions; docs/workers.md, Changing a handler safely): each
-- attempt records the code version of the handler that ran it (RunClaimed.handler_version),
-- and a contract can require versions, so that a worker that runs other code (a stale worker
-- during a rolling deploy) does not take its runs.
--
-- - awooop_processes.handler_version: the version of the handler a worker process runs
--   (`awooop worker --handler-version V`, AWOOOP_HANDLER_VERSION, the handler's declared
--   `__awooop_version__`, else derived from its module's source); NULL for the processes of a
--   release before this one.
-- - awooop_handler_versions: per project and contract, the handler versions its runs accept
--   (`awooop projects require-version P C V [V ...]`, PUT /v1/projects/{p}/versions/{c}): a
--   list, so that during a rolling deploy both the old and the new version are accepted, then
--   only the new one. A project's own rows (row-level security, like its pauses and limits).
--   Every claim statement tests it on the row it locks (awooop/eventlog/sql/
--   _run_version_accepted.sql, inside _run_served.sql): one probe of the primary key.
-- - awooop_worker_versions(project, contract): for blocked_on (awooop/runs/blocked_facts.py):
--   the versions the live worker processes that serve runs of that contract in that project
--   run (their routes, migration 0137), sorted; NULL when no such process records one. A run
--   whose contract requires versions none of them runs waits with `no_worker_for_version`.
--   Like awooop_contract_served(), tenants get the answer, not the rows.
--
-- A nullable column without a default on a small table (a catalog change, no rewrite), a new
-- table and a new function: the previous release neither reads nor writes them (its workers
-- take runs whatever their contract requires: require versions once none of them runs).
ALTER TABLE awooop_processes
    ADD COLUMN handler_version text CHECK (length(handler_version) BETWEEN 1 AND 64);

CREATE TABLE awooop_handler_versions (
    project_id   text NOT NULL,
    contract_id  text NOT NULL CHECK (length(contract_id) BETWEEN 1 AND 200),
    versions     text[] NOT NULL CHECK (cardinality(versions) BETWEEN 1 AND 16
                                        AND array_position(versions, NULL) IS NULL),
    set_by       text NOT NULL CHECK (length(set_by) BETWEEN 1 AND 200),
    set_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, contract_id)
);
SELECT awooop_enforce_tenant_isolation('awooop_handler_versions');

CREATE FUNCTION awooop_worker_versions(project text, contract text) RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT array_agg(DISTINCT p.handler_version ORDER BY p.handler_version)
            FROM public.awooop_processes p
            WHERE p.kind IN ('worker', 'up')
              AND p.seen_at >= now() - make_interval(secs => 3 * p.recheck_s)
              AND p.handler_version IS NOT NULL
              AND (p.contracts IS NULL OR coalesce(contract = ANY (p.contracts), false))
              AND (p.projects IS NULL OR project = ANY (p.projects)));
END
$$;
REVOKE ALL ON FUNCTION awooop_worker_versions(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_worker_versions(text, text) TO awooop_app, awooop_platform;
