-- awooop: online
-- phase: expand
--
-- A producer login's binding read without a function call (R-43: the same rows, the same
-- guarantees as 0090).
--
-- The restrictive policy tenant_binding (0090) asked awooop_my_projects(), a SECURITY DEFINER
-- PL/pgSQL function with its own search_path, once per table a statement reads or writes (an
-- initplan), and awooop_tenant_bound and awooop_run_of_project asked it again inside. One
-- submit of a producer login called it 8 times: each call switches the user and the
-- search_path and back and runs its query through SPI, about 13 us of Postgres CPU a call
-- (pg_stat_user_functions with track_functions=all), a third of what the producer login cost
-- beyond the owner's path (ops/bench/producer_pool.py, docs/benchmarks.md).
--
-- awooop_my_grants is the login's own rows of awooop_tenant_grants (role_name = session_user),
-- as awooop_my_projects() returns them: a view, which reads the table with its owner's
-- privileges as the SECURITY DEFINER function did, and which a policy's initplan reads as a
-- plain index scan of the grants' primary key. security_barrier: a caller's own function in a
-- WHERE clause on the view (a producer may create temporary functions) is not run before the
-- view's condition, so it never sees another login's row. Granted to every role that runs the
-- statements which read it (the producer's and the runtime's: the ingest guard,
-- awooop/eventlog/sql/ingest_new.sql, names it for every role); each login sees its own
-- bindings only, which awooop_my_projects() already told it.
--
-- tenant_binding on every table that has it (parents and partitions), and
-- awooop_enforce_tenant_binding for the tables and partitions created from now on, read the view:
-- project_id = ANY (ARRAY(SELECT project FROM awooop_my_grants)) is still one initplan per
-- statement and table, evaluated once. awooop_tenant_bound reads it too (same result).
-- awooop_my_projects stays, for the previous release's statements and for operators.
--
-- Online: the view and the functions are catalogue changes; ALTER POLICY takes an ACCESS
-- EXCLUSIVE lock on its table for the rest of its step's transaction (the policies of every
-- table in one short step, under lock_timeout, retried if a lock is not granted).
CREATE VIEW awooop_my_grants WITH (security_barrier) AS
    SELECT g.project FROM public.awooop_tenant_grants g WHERE g.role_name = session_user;

REVOKE ALL ON awooop_my_grants FROM PUBLIC;

GRANT SELECT ON awooop_my_grants TO awooop_producer, awooop_app, awooop_platform;

CREATE OR REPLACE FUNCTION awooop_enforce_tenant_binding(target regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP POLICY IF EXISTS tenant_binding ON %s', target);
    EXECUTE format(
        'CREATE POLICY tenant_binding ON %s AS RESTRICTIVE FOR ALL TO awooop_producer '
        'USING (project_id = ANY (ARRAY(SELECT g.project FROM awooop_my_grants g))) '
        'WITH CHECK (project_id = ANY (ARRAY(SELECT g.project FROM awooop_my_grants g)))',
        target);
END
$$;

DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT p.polrelid::regclass FROM pg_policy p
        WHERE p.polname = 'tenant_binding' ORDER BY p.polrelid
    LOOP
        EXECUTE format(
            'ALTER POLICY tenant_binding ON %s '
            'USING (project_id = ANY (ARRAY(SELECT g.project FROM awooop_my_grants g))) '
            'WITH CHECK (project_id = ANY (ARRAY(SELECT g.project FROM awooop_my_grants g)))',
            t);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION awooop_tenant_bound(p text) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT r.rolsuper OR r.rolbypassrls
                   OR NOT pg_has_role(current_user, 'awooop_producer', 'USAGE')
                   OR EXISTS (SELECT FROM public.awooop_my_grants m WHERE m.project = p)
            FROM pg_roles r WHERE r.rolname = current_user);
END
$$;
