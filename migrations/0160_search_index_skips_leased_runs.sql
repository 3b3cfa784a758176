-- awooop: online
-- phase: expand
--
-- The trigram index of the run search (0128) leaves out the leased runs (RUNNING,
-- WAITING_TOOL), whose text the search then reads from the rows themselves.
--
-- Every status change is a new row version with an entry in each index whose predicate the
-- new version meets (0158 says why), and a GIN trigram entry is one per distinct trigram of
-- the run's input, result and failure text: about 0.2 ms of Postgres CPU per version for a
-- 400-byte input and 0.8 ms for 2 KB (a webhook's payload is often more), against a few
-- microseconds for each btree index. A run is written PENDING, RUNNING, then finished, and once
-- more RUNNING after each sleep, wait or tool call it resumes from: the claims were a third or
-- more of the index's writes. A claimed run's text does not change until its attempt ends, and
-- the leased runs are few (bounded by the workers' slots; 0158's partial index lists them): the
-- search reads them directly, the rest through the index.
--
-- awooop_search_runs() keeps its signature, its scope rules (0128) and its answers: the same
-- runs, in two parts (the indexed runs, then the leased ones) under one LIMIT.
--
-- Online: the new index is built CONCURRENTLY (writers and readers go on), the function
-- replaced (a catalogue change), then the old index dropped CONCURRENTLY. No statement of
-- either release names an index; the previous release's searches call this function.
CREATE INDEX CONCURRENTLY awooop_run_state_search_settled_idx ON awooop_run_state USING gin (
    (input::text || ' ' || coalesce(result::text, '') || ' ' || coalesce(failure_reason, ''))
    gin_trgm_ops
) WHERE status NOT IN ('RUNNING', 'WAITING_TOOL');

CREATE OR REPLACE FUNCTION awooop_search_runs(
    p_project text, p_statuses text[], p_pattern text, p_limit integer
)
RETURNS SETOF uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    caller text := CASE current_setting('role') WHEN 'none' THEN session_user::text
                   ELSE current_setting('role') END;
    tenant text := NULLIF(current_setting('awooop.project_id', true), '');
    unrestricted boolean;
BEGIN
    SELECT r.rolsuper OR r.rolbypassrls INTO unrestricted FROM pg_roles r WHERE r.rolname = caller;
    IF NOT coalesce(unrestricted, false) THEN
        IF tenant IS NULL OR (p_project IS NOT NULL AND p_project <> tenant) THEN
            RETURN;  -- what the tenant policy shows: nothing without the setting or elsewhere
        END IF;
        p_project := tenant;
    END IF;
    -- EXECUTE: planned for these values (a trigram index scan, or the table for a pattern
    -- that nearly every run contains), never a generic plan. The two parts share their
    -- conditions (%1$s); the first carries the index's predicate word for word, so that the
    -- planner can prove it, the second reads the leased runs through their own partial index
    -- (0158) or the project's status index.
    RETURN QUERY EXECUTE format(
        'SELECT r.run_id FROM public.awooop_run_state r
         WHERE r.status NOT IN (''RUNNING'', ''WAITING_TOOL'') AND %1$s
         UNION ALL
         SELECT r.run_id FROM public.awooop_run_state r
         WHERE r.status IN (''RUNNING'', ''WAITING_TOOL'') AND %1$s
         LIMIT $2',
        '($3::text IS NULL OR r.project_id = $3)
         AND ($4::text[] IS NULL OR r.status = ANY ($4))
         AND (r.input::text || '' '' || coalesce(r.result::text, '''') || '' ''
              || coalesce(r.failure_reason, '''')) ILIKE $1')
        USING p_pattern, least(p_limit, 10000), p_project, p_statuses;
END
$$;

DROP INDEX CONCURRENTLY IF EXISTS awooop_run_state_search_idx;
