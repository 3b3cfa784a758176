-- The tenant binding's two functions (0090) in PL/pgSQL, same results.
--
-- As SQL functions that cannot be inlined (SECURITY DEFINER, SET search_path), Postgres
-- planned their bodies again on every call. awooop_tenant_bound is on the producer's path: the
-- configuration read of every submit in a caller's transaction and of every emit asks it, and
-- awooop_my_projects runs once per statement of a producer login (the restrictive policy's
-- initplan). PL/pgSQL keeps each body's plan for the session. Measured with pgbench, one
-- client, prepared `SELECT f(...)` against `SELECT 1`: awooop_tenant_bound 0.06 -> 0.013 ms as
-- the tables' owner and 0.115 -> 0.022 ms as a bound producer login; awooop_my_projects
-- 0.055 -> 0.018 ms as a producer login.
--
-- CREATE OR REPLACE keeps the owner and the grants of 0090; the options (SECURITY DEFINER,
-- search_path, STABLE) are restated because the new definition replaces them.

CREATE OR REPLACE FUNCTION awooop_my_projects() RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(g.project ORDER BY g.project), '{}')
            FROM public.awooop_tenant_grants g
            WHERE g.role_name = session_user);
END
$$;

CREATE OR REPLACE FUNCTION awooop_tenant_bound(p text) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT r.rolsuper OR r.rolbypassrls
                   OR NOT pg_has_role(current_user, 'awooop_producer', 'USAGE')
                   OR p = ANY (public.awooop_my_projects())
            FROM pg_roles r WHERE r.rolname = current_user);
END
$$;
