-- Two things: repairs that bring a database migrated by an earlier release to the schema a
-- fresh database has (sections 1 and 2), and the schema floor (section 3).
--
-- The repairs fix where the releases differed (migrations/released.toml;
-- tests/integration/test_migration_history.py compares every release's upgraded schema with a
-- fresh one). Each tests for the old shape first, so on a database that already has the
-- current schema it changes nothing and takes no lock.

-- 1. Tenant isolation policies without NULLIF. A database created before 0010 landed (at a
--    release that had 0040, numbered after it) applied 0010 after 0040's sweep over every
--    table, and one created before 0050 used the helper kept the old body of 0050: those
--    tables kept a tenant_isolation policy under which an empty awooop.project_id (a pooled
--    connection's forgotten setting) matches the rows of project ''. Only the policy differs
--    (0090's sweep added tenant_binding to every table, and grants revoked later stay
--    revoked), so only the policy is altered, to awooop_enforce_tenant_isolation's expression.
DO $repair$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT format('%I.%I', p.schemaname, p.tablename)::regclass
        FROM pg_policies p
        WHERE p.schemaname = 'public' AND p.policyname = 'tenant_isolation'
          AND p.qual NOT LIKE '%NULLIF%'
    LOOP
        EXECUTE format(
            'ALTER POLICY tenant_isolation ON %s '
            'USING (project_id = NULLIF(current_setting(''awooop.project_id'', true), '''')) '
            'WITH CHECK (project_id = NULLIF(current_setting(''awooop.project_id'', true), ''''))',
            t);
    END LOOP;
END
$repair$;

-- 2. 0112 as first released read the dedupe windows' partitions in its own view and left the
--    log's view of 0100 alone; the released 0112 lists both through awooop_partition_ranges.
--    Same columns, same rows: the views are replaced in place (grants are kept).
DO $repair$
BEGIN
    IF to_regprocedure('awooop_partition_ranges(regclass)') IS NOT NULL THEN
        RETURN;
    END IF;
    CREATE FUNCTION awooop_partition_ranges(parent regclass)
    RETURNS TABLE (partition_name text, range_from timestamptz, range_to timestamptz,
                   detach_pending boolean)
    LANGUAGE sql STABLE AS $$
SELECT c.relname::text,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz,
       i.inhdetachpending
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = parent
$$;
    CREATE OR REPLACE VIEW awooop_log_partitions AS
    SELECT partition_name COLLATE "C" AS partition_name, range_from, range_to
    FROM awooop_partition_ranges('awooop_events');
    CREATE OR REPLACE VIEW awooop_dedupe_partitions AS
    SELECT partition_name COLLATE "C" AS partition_name, range_from, range_to
    FROM awooop_partition_ranges('awooop_channel_event_dedupe')
    WHERE NOT detach_pending;
END
$repair$;

-- 3. The schema floor: the oldest release whose processes may run on this schema, named by that
--    release's newest migration file. Every process compares it with its own newest file at
--    start (awooop/core/schema_check.py) and refuses (E-MIGRATE-003) when its release is older.
--    A migration that removes or changes what earlier releases' code uses (a contract step)
--    raises it in the same transaction:
--        UPDATE awooop_schema_floor SET oldest_release = 'NNNN_this_contract_step.sql';
--    Migrations that only add leave it alone, so the previous release keeps running on them.
CREATE TABLE IF NOT EXISTS awooop_schema_floor (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    oldest_release text NOT NULL
);
INSERT INTO awooop_schema_floor (oldest_release) VALUES ('0000') ON CONFLICT DO NOTHING;
GRANT SELECT ON awooop_schema_floor TO awooop_platform;
