-- Background loops and tenant isolation (R-40, R-42, R-43).

-- 1. One helper that puts a table under tenant isolation, for this and every later migration:
--        SELECT awooop_enforce_tenant_isolation('awooop_my_table');
--    ENABLE + FORCE row-level security (FORCE: the table owner obeys it too) and one policy
--    keyed on the transaction-local setting awooop.project_id. NULLIF: a pooled connection
--    that had the setting in an earlier transaction reads it back as '' (not NULL); without
--    NULLIF such a forgotten setting would let a tenant path see and write rows whose
--    project_id is ''. With it, a missing or empty setting matches nothing, for reads and
--    writes alike. Idempotent: an existing tenant_isolation policy is replaced.
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
    EXECUTE format(
        'GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO awooop_app, awooop_platform', target);
END
$$;

-- 2. Projects: the list per-tenant loops run one instance for. Every project that has any
--    event stream (a run, a revision) is registered by a trigger on awooop_event_streams, so
--    no write path has to remember it; operators may add a project ahead of its first event
--    or set disabled = true to stop its per-tenant loops.
CREATE TABLE awooop_projects (
    project_id     text PRIMARY KEY CHECK (project_id <> ''),
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    disabled       boolean NOT NULL DEFAULT false
);

-- SECURITY DEFINER: the trigger runs with the migrator's rights, so a tenant transaction
-- registers its project without needing to see other projects' rows (ON CONFLICT DO NOTHING
-- costs one index probe once the project is known).
CREATE FUNCTION awooop_register_project() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO awooop_projects (project_id) VALUES (NEW.project_id)
    ON CONFLICT (project_id) DO NOTHING;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION awooop_register_project() FROM PUBLIC;

CREATE TRIGGER awooop_event_streams_register_project
    AFTER INSERT ON awooop_event_streams
    FOR EACH ROW EXECUTE FUNCTION awooop_register_project();

INSERT INTO awooop_projects (project_id)
    SELECT DISTINCT project_id FROM awooop_event_streams
    ON CONFLICT (project_id) DO NOTHING;

-- 3. Loop heartbeats: written (platform role) by every loop after each iteration, so
--    `awooop loops list` in another process shows when each loop last ran and failed.
CREATE TABLE awooop_loop_heartbeats (
    loop_name             text NOT NULL,
    project_id            text NOT NULL,
    category              text NOT NULL,
    interval_s            double precision NOT NULL,
    last_success_at       timestamptz,
    last_failure_at       timestamptz,
    last_error            text,
    consecutive_failures  integer NOT NULL DEFAULT 0,
    host                  text NOT NULL,
    pid                   integer NOT NULL,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (loop_name, project_id)
);

-- 4. Every table that has a project_id column, including the two above and any that earlier
--    migrations created, gets the isolation above (0006 used a policy without NULLIF).
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
        PERFORM awooop_enforce_tenant_isolation(t);
    END LOOP;
END
$$;
