-- The pointer check (0030) probes the pointer table once per contract, whatever the project's
-- size. In 0030 the pointer lookup was a plain LEFT JOIN against unnest(...), which the planner
-- turned into a scan of all of the project's pointers (bitmap on project_id, then a hash join
-- on family and contract). Both lookups are now LATERAL subqueries with OFFSET 0, which keeps
-- the planner from pulling them up into joins: each contract costs one primary-key probe of
-- awooop_active_revisions, and the body's probe sits under a one-time filter, so a cache hit
-- never touches awooop_contract_revisions (EXPLAIN: "never executed"). Same signature, same
-- result; grants are kept by CREATE OR REPLACE.
CREATE OR REPLACE FUNCTION awooop_pointer_check(
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
