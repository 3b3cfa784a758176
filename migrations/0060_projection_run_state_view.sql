-- Run state built by a projector from the event streams (R-32), and the runs per project and
-- state for dashboards, kept in the same transaction. Same columns as awooop_run_state: the
-- projector path must give the identical rows (the lease clock aside: heartbeats renew it on
-- the inline table without events). The row's version is the projector's checkpoint for the
-- run's stream.
CREATE TABLE awooop_run_state_view (LIKE awooop_run_state INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE awooop_run_state_view ADD PRIMARY KEY (run_id);
CREATE INDEX awooop_run_state_view_project_status_idx ON awooop_run_state_view (project_id, status);

CREATE TABLE awooop_run_counts (
    project_id  text NOT NULL,
    status      text NOT NULL,
    runs        integer NOT NULL CHECK (runs >= 0),
    PRIMARY KEY (project_id, status)
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['awooop_run_state_view', 'awooop_run_counts'] LOOP
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
