-- awooop: online
-- phase: expand
--
-- Searching runs (awooop/runs/search.py): by the start of a run id or of an idempotency key,
-- and by text contained in a run's input, result or failure reason.
--
-- - A run id prefix is a range of the primary key (uuid_ge/uuid_le are leakproof, so the range
--   is an index condition also under row-level security): no new index.
-- - A key prefix is a range of text_pattern_ops (~>=~ ~<~: byte order whatever the database's
--   collation, and leakproof): awooop_run_state_key_pattern_idx.
-- - Text is a trigram GIN index (pg_trgm, a trusted extension: the migrator needs CREATE on
--   the database only) on the text the console searches. LIKE/ILIKE are not leakproof, so
--   under row-level security Postgres would apply them only after the tenant policy and never
--   through this index: a tenant's search would read all its runs. awooop_search_runs() runs
--   the ILIKE as the function's owner (the migrator, which bypasses row-level security:
--   docs/operations.md) and confines itself to what the caller's own policies let it see:
--   the project set for the transaction (awooop.project_id, as tenant_isolation) for a role
--   under row-level security, every project (or the one named) for one that bypasses it; and
--   to the statuses asked for (a bulk retry's FAILED runs), before its limit.
--   The caller is the session's role (SET ROLE, or the login without one): inside a SECURITY
--   DEFINER function current_user is the owner. It returns at most p_limit run ids; the page
--   is then read under row-level security as usual. Producer logins get no grant.
--
-- Every run update changes status (never HOT), so each index here takes an entry per claim
-- and completion; the GIN index's pending list (fastupdate) batches those. Both indexes are
-- built CONCURRENTLY (online): run writes go on meanwhile. `awooop replay` rebuilds and swaps
-- the table with its indexes; the function looks the table up by name at each call.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE INDEX CONCURRENTLY awooop_run_state_key_pattern_idx
    ON awooop_run_state (provider_event_id text_pattern_ops);

CREATE INDEX CONCURRENTLY awooop_run_state_search_idx ON awooop_run_state USING gin (
    (input::text || ' ' || coalesce(result::text, '') || ' ' || coalesce(failure_reason, ''))
    gin_trgm_ops
);

CREATE FUNCTION awooop_search_runs(
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
    -- that nearly every run contains), never a generic plan.
    RETURN QUERY EXECUTE
        'SELECT r.run_id FROM public.awooop_run_state r
         WHERE ($3::text IS NULL OR r.project_id = $3)
           AND ($4::text[] IS NULL OR r.status = ANY ($4))
           AND (r.input::text || '' '' || coalesce(r.result::text, '''') || '' ''
                || coalesce(r.failure_reason, '''')) ILIKE $1
         LIMIT $2'
        USING p_pattern, least(p_limit, 10000), p_project, p_statuses;
END
$$;

REVOKE ALL ON FUNCTION awooop_search_runs(text, text[], text, integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION awooop_search_runs(text, text[], text, integer)
    TO awooop_app, awooop_platform;
