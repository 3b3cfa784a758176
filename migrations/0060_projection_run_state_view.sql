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

-- Tenant isolation (R-43), as every table with a project_id (migration 0040).
SELECT awooop_enforce_tenant_isolation('awooop_run_state_view');
SELECT awooop_enforce_tenant_isolation('awooop_run_counts');
