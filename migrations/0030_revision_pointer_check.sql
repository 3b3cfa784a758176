-- The pointer check before every LLM call (R-24) in ONE round trip under row-level security.
--
-- A tenant read normally needs BEGIN; set_config(awooop.project_id); SELECT; COMMIT (four round
-- trips). This function sets the tenant itself, transaction-locally, runs the lookup as the
-- caller (SECURITY INVOKER: awooop_app, so RLS still applies), and puts the previous setting
-- back, so it is also safe inside a caller's tenant transaction. Called in autocommit mode it
-- is one statement: one prepared Bind/Execute, one round trip.
--
-- For each (family, contract, cached revision) it returns the active pointer; the body and
-- hash of the active revision come along only when the pointer differs from the cached
-- revision. Both lookups are LATERAL subqueries with OFFSET 0, which keeps the planner from
-- pulling them up into joins: each contract costs one probe of the pointer's primary key
-- (never a scan of the project's pointers, whatever their number), and the body's probe sits
-- under a one-time filter, so a cache hit never touches awooop_contract_revisions (EXPLAIN:
-- "never executed").
CREATE FUNCTION awooop_pointer_check(
    p_project text, p_families text[], p_contracts text[], p_cached uuid[]
)
RETURNS TABLE (
    o_family text, o_contract text, o_active uuid, o_body jsonb, o_body_hash text
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $$
DECLARE
    previous text := current_setting('awooop.project_id', true);
BEGIN
    PERFORM set_config('awooop.project_id', p_project, true);
    RETURN QUERY
        SELECT k.family, k.contract, a.active_revision_id, r.body, r.body_hash
        FROM unnest(p_families, p_contracts, p_cached) AS k (family, contract, cached)
        LEFT JOIN LATERAL (
            SELECT ar.active_revision_id
            FROM awooop_active_revisions ar
            WHERE ar.project_id = p_project
              AND ar.contract_family = k.family
              AND ar.contract_id = k.contract
            OFFSET 0
        ) a ON true
        LEFT JOIN LATERAL (
            SELECT cr.body, cr.body_hash
            FROM awooop_contract_revisions cr
            WHERE cr.revision_id = a.active_revision_id
              AND a.active_revision_id IS DISTINCT FROM k.cached
            OFFSET 0
        ) r ON true;
    PERFORM set_config('awooop.project_id', coalesce(previous, ''), true);
END
$$;

REVOKE ALL ON FUNCTION awooop_pointer_check(text, text[], text[], uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_pointer_check(text, text[], text[], uuid[])
    TO awooop_app, awooop_platform;
