-- Producer logins bound to their projects, and credentials out of every tenant's reach (R-43).
--
-- Until now every tenant path ran as awooop_app, whose policy compares project_id with the
-- setting awooop.project_id. That setting is an ordinary one: any session may change it, so
-- a service given awooop_app could read another project's channel secret, or, with the
-- setting at __platform__, insert an admin token of its own. The setting stops a forgotten
-- WHERE clause; it does not stop the holder of the role. So:
--
-- 1. Producer services get their own group role, awooop_producer, never awooop_app. Which
--    projects a producer may touch is bound to its LOGIN in awooop_tenant_grants
--    (`awooop tenants grant ROLE PROJECT...`, run by the tables' owner), and a RESTRICTIVE
--    policy, tenant_binding, on every table with a project_id ANDs that binding with the
--    existing permissive tenant_isolation policy (the setting). A producer therefore sees and
--    writes a row only when its project is the one set for the transaction (set_tenant: the
--    guard against a forgotten WHERE, also between the projects of one login) AND one bound
--    to its login (the guard against the holder of the role: nothing it sets widens it).
--
--    The binding is keyed on session_user, the role that logged in: current_user changes with
--    SET ROLE (a producer login could switch to any role it is a member of), session_user
--    cannot be changed by a non-superuser login. A login member of several roles is bound to
--    exactly the projects granted to the login itself; group roles are not followed, so one
--    GRANT of another role cannot widen it either. `awooop tenants grant` refuses roles that
--    cannot log in, superusers, BYPASSRLS roles and members of awooop_app or awooop_platform
--    (each could leave the policy by SET ROLE or bypass it).
--
--    The policy reads the binding through awooop_my_projects(), a SECURITY DEFINER function
--    that returns the projects of session_user only: the grants table itself is readable by
--    the platform role and its owner alone. The call sits in an uncorrelated scalar subquery,
--    so Postgres runs it once per statement (an InitPlan), not once per row. The policy applies
--    to members of awooop_producer only: the runtime's own roles (awooop_app: HTTP ingest,
--    tenant transactions of the CLI and the management routes; awooop_platform: loops, relay,
--    workers) do not evaluate it, so their hot paths are unchanged.
--
-- 2. awooop_producer is granted exactly what the producer library needs, each under both
--    policies: runs (insert, read), the event log and its stream heads (insert, read, move a
--    domain stream's head), dedupe rows (insert, read, delete an expired key), the project's
--    active contract revisions (read: a run's max_attempts) and, of awooop_channels, only the
--    columns that are not secrets (project_id, channel_type, dedupe_ttl_s). Nothing else: no
--    channel secrets, no token tables, no approvals, no platform tables (relay cursor,
--    leaders, heartbeats, projects), no grants table; and no default privileges, so a table a
--    later migration adds is closed to producers until it grants them something. No project
--    may be bound that is not an ordinary project id (`__platform__` never is: see the CHECK).
--
-- 3. Credentials: awooop_channels (secrets) and awooop_api_tokens (token hashes) are written
--    only on the platform role, which the management commands use (awooop/ingest/credentials.py);
--    awooop_app keeps reading them (the runtime's HTTP ingest verifies signatures and tokens
--    with them) but can no longer insert, update or delete a row, whatever it sets. An admin
--    token is a row of __platform__ (0070's CHECK), so creating one needs the platform role.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'awooop_producer') THEN
        BEGIN
            CREATE ROLE awooop_producer NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created concurrently by a migrator of another database
        END;
    END IF;
END
$$;

-- The bindings. Not a tenant table (its column is `project`, not project_id): no tenant role
-- reads it at all; producers see their own login's projects through awooop_my_projects().
CREATE TABLE awooop_tenant_grants (
    role_name   text NOT NULL CHECK (role_name <> ''),
    project     text NOT NULL CHECK (project ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role_name, project)
);
-- 0001's default privileges granted the new table to both runtime roles: take them back.
REVOKE ALL ON awooop_tenant_grants FROM PUBLIC, awooop_app, awooop_platform;
GRANT SELECT ON awooop_tenant_grants TO awooop_platform;

CREATE FUNCTION awooop_my_projects() RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(array_agg(g.project ORDER BY g.project), '{}')
    FROM public.awooop_tenant_grants g
    WHERE g.role_name = session_user
$$;
REVOKE ALL ON FUNCTION awooop_my_projects() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_my_projects() TO awooop_producer, awooop_app, awooop_platform;

-- Whether the current role may write project p as far as the binding goes: true for roles the
-- binding does not apply to (not a member of awooop_producer, or RLS bypassed), else whether p
-- is bound to the login. The producer library asks before it writes, so a refusal is a coded
-- error (E-INGEST-003) and the caller's transaction stays usable; the policy is the guard.
CREATE FUNCTION awooop_tenant_bound(p text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.rolsuper OR r.rolbypassrls
           OR NOT pg_has_role(current_user, 'awooop_producer', 'USAGE')
           OR p = ANY (public.awooop_my_projects())
    FROM pg_roles r WHERE r.rolname = current_user
$$;
REVOKE ALL ON FUNCTION awooop_tenant_bound(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_tenant_bound(text) TO awooop_producer, awooop_app, awooop_platform;

-- The restrictive policy, for this and every later migration: awooop_enforce_tenant_isolation
-- (0040) now adds it too, so one line still isolates a new table.
CREATE FUNCTION awooop_enforce_tenant_binding(target regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP POLICY IF EXISTS tenant_binding ON %s', target);
    EXECUTE format(
        'CREATE POLICY tenant_binding ON %s AS RESTRICTIVE FOR ALL TO awooop_producer '
        'USING (project_id = ANY ((SELECT awooop_my_projects())::text[])) '
        'WITH CHECK (project_id = ANY ((SELECT awooop_my_projects())::text[]))',
        target);
END
$$;

CREATE OR REPLACE FUNCTION awooop_enforce_tenant_isolation(target regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', target);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', target);
    EXECUTE format(
        'CREATE POLICY tenant_isolation ON %s '
        'USING (project_id = NULLIF(current_setting(''awooop.project_id'', true), '''')) '
        'WITH CHECK (project_id = NULLIF(current_setting(''awooop.project_id'', true), ''''))',
        target);
    PERFORM awooop_enforce_tenant_binding(target);
    EXECUTE format(
        'GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO awooop_app, awooop_platform', target);
END
$$;

DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT c.oid::regclass
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'project_id' AND NOT a.attisdropped
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
    LOOP
        PERFORM awooop_enforce_tenant_binding(t);
    END LOOP;
END
$$;

-- What producers may do (section 2 above).
GRANT USAGE ON SCHEMA public TO awooop_producer;
GRANT SELECT, INSERT ON awooop_run_state, awooop_events TO awooop_producer;
GRANT SELECT, INSERT, UPDATE ON awooop_event_streams TO awooop_producer;
GRANT SELECT, INSERT, DELETE ON awooop_channel_event_dedupe TO awooop_producer;
GRANT SELECT ON awooop_active_revisions, awooop_contract_revisions TO awooop_producer;
GRANT SELECT (project_id, channel_type, dedupe_ttl_s) ON awooop_channels TO awooop_producer;

-- What a producer may write, row by row (restrictive, so ANDed with the policies above): the
-- producer library writes new runs (PENDING, version 1, never attempted), their RunCreated at
-- version 1, and domain events at the head of domain/<project>/<stream>. So a producer login
-- cannot move one of its own runs on by hand (a RunClaimed, an ApprovalGranted, a run row
-- written COMPLETED, a run stream's head moved): run progress stays the runtime's.
CREATE POLICY producer_writes ON awooop_run_state AS RESTRICTIVE FOR INSERT TO awooop_producer
    WITH CHECK (status = 'PENDING' AND version = 1 AND attempt_count = 0 AND worker_id IS NULL);
CREATE POLICY producer_writes ON awooop_events AS RESTRICTIVE FOR INSERT TO awooop_producer
    WITH CHECK (stream_id LIKE 'domain/%' OR (event_type = 'RunCreated' AND version = 1));
CREATE POLICY producer_inserts ON awooop_event_streams AS RESTRICTIVE FOR INSERT
    TO awooop_producer WITH CHECK (stream_id LIKE 'domain/%' OR version = 1);
CREATE POLICY producer_updates ON awooop_event_streams AS RESTRICTIVE FOR UPDATE
    TO awooop_producer USING (stream_id LIKE 'domain/%') WITH CHECK (stream_id LIKE 'domain/%');

-- The helpers change tables; only their owner (the migrator) calls them.
REVOKE ALL ON FUNCTION awooop_enforce_tenant_binding(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION awooop_enforce_tenant_isolation(regclass) FROM PUBLIC;

-- Credentials (section 3 above): written on the platform role only.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON awooop_channels, awooop_api_tokens FROM awooop_app;
