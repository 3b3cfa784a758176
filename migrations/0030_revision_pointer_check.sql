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
-- revision: OFFSET 0 keeps the LATERAL subquery from being pulled up into a join, so its
-- condition on outer columns stays a one-time filter and a cache hit never touches
-- awooop_contract_revisions (EXPLAIN shows the index scan "never executed").
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
        LEFT JOIN awooop_active_revisions a
            ON a.project_id = p_project
           AND a.contract_family = k.family
           AND a.contract_id = k.contract
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
