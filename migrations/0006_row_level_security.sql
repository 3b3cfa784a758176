-- Tenant isolation (R-43). Under awooop_app a transaction sees only the rows of the project
-- named by the transaction-local setting awooop.project_id; without the setting,
-- current_setting(..., true) is NULL or '' and the policy matches nothing: a forgotten
-- setting shows no rows rather than every row. awooop_platform has BYPASSRLS.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY[
        'awooop_event_streams', 'awooop_events', 'awooop_run_state',
        'awooop_channel_event_dedupe', 'awooop_contract_revisions',
        'awooop_active_revisions', 'awooop_contract_outbox'
    ] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY tenant_isolation ON %I '
            'USING (project_id = current_setting(''awooop.project_id'', true)) '
            'WITH CHECK (project_id = current_setting(''awooop.project_id'', true))', t);
        EXECUTE format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO awooop_app, awooop_platform', t);
    END LOOP;
END
$$;
