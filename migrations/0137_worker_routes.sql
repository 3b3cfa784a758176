-- phase: expand
--
-- Worker routes (awooop.runs.routing; docs/workers.md, Routing runs to workers): a worker
-- started with `awooop worker --contract C [--project P]` claims only runs of those contracts
-- (and projects). Its row in the process registry (migration 0121) records what it serves:
--
-- - awooop_processes.contracts / projects: the contracts and projects the process's worker
--   serves; NULL serves every one (a worker without --contract or --project, `awooop up`, and
--   every process of a release before this one, which serves every run).
-- - awooop_contract_served(project, contract): for blocked_on (awooop/runs/blocked_facts.py):
--   true when a live worker process serves runs of that contract in that project, false when
--   live worker processes exist and none does (`no_worker_for_contract`), NULL when no worker
--   process is live at all (`pending_no_worker` decides that case). A run without a contract
--   (NULL) is served only by workers without --contract. Like awooop_live_workers(), tenants
--   get the answer, not the rows.
--
-- Two nullable columns without a default on a small table (a catalog change, no rewrite) and a
-- new function: the previous release neither reads nor writes them.
ALTER TABLE awooop_processes
    ADD COLUMN contracts text[] CHECK (cardinality(contracts) BETWEEN 1 AND 1000),
    ADD COLUMN projects text[] CHECK (cardinality(projects) BETWEEN 1 AND 1000);

CREATE FUNCTION awooop_contract_served(project text, contract text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT CASE WHEN count(*) = 0 THEN NULL
                        ELSE bool_or((p.contracts IS NULL OR coalesce(contract = ANY (p.contracts), false))
                                     AND (p.projects IS NULL OR project = ANY (p.projects)))
                   END
            FROM public.awooop_processes p
            WHERE p.kind IN ('worker', 'up')
              AND p.seen_at >= now() - make_interval(secs => 3 * p.recheck_s));
END
$$;
REVOKE ALL ON FUNCTION awooop_contract_served(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_contract_served(text, text) TO awooop_app, awooop_platform;
