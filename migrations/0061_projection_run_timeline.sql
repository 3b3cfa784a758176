-- The run timeline (R-32): one row per event of each run. The highest version stored for a
-- run is the projector's checkpoint for the run's stream.
CREATE TABLE awooop_run_timeline (
    run_id      uuid NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    project_id  text NOT NULL,
    position    bigint NOT NULL,
    event_type  text NOT NULL,
    at          timestamptz NOT NULL,
    attempt     integer NOT NULL,
    worker_id   text,
    trace_id    text,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (run_id, version)
);
CREATE INDEX awooop_run_timeline_trace_idx ON awooop_run_timeline (trace_id)
    WHERE trace_id IS NOT NULL;

-- Tenant isolation (R-43), as every table with a project_id (migration 0040).
SELECT awooop_enforce_tenant_isolation('awooop_run_timeline');
