-- Roles for tenant isolation (R-43). Roles are cluster-wide, so creation is idempotent.
-- awooop_app: what tenant code paths run as; row-level security applies to it.
-- awooop_platform: what platform loops run as; BYPASSRLS, sees every project.
-- Processes log in with the configured user and take one of these roles per connection.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'awooop_app') THEN
        BEGIN
            CREATE ROLE awooop_app NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created concurrently by a migrator of another database
        END;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'awooop_platform') THEN
        BEGIN
            CREATE ROLE awooop_platform NOLOGIN BYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO awooop_app, awooop_platform;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO awooop_app, awooop_platform;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO awooop_app, awooop_platform;
