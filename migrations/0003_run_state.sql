-- Run state: the inline projection of each run's event stream (R-10, R-11).
-- Every column except the lease clock (lease_until, heartbeat_at while a lease is renewed)
-- is exactly apply() folded over the run's events; heartbeats renew the lease clock in one
-- statement per worker without writing events (R-12).
CREATE TABLE awooop_run_state (
    run_id               uuid PRIMARY KEY,
    project_id           text NOT NULL,
    channel_type         text NOT NULL,
    provider_event_id    text NOT NULL,
    contract_id          text,
    status               text NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'WAITING_TOOL',
                             'WAITING_APPROVAL', 'RESUMED', 'COMPLETED', 'FAILED', 'CANCELLED')),
    version              integer NOT NULL,
    attempt_count        integer NOT NULL DEFAULT 0,
    max_attempts         integer NOT NULL,
    worker_id            text,
    lease_until          timestamptz,
    heartbeat_at         timestamptz,
    reaped_at            timestamptz,
    failure_reason       text,
    failure_code         text,
    saga_steps           jsonb NOT NULL DEFAULT '{}'::jsonb,
    input                jsonb NOT NULL,
    result               jsonb,
    waiting_for          text,
    approval_expires_at  timestamptz,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    finished_at          timestamptz
);

-- The polling path and the reaper look only at live runs; partial indexes stay small.
CREATE INDEX awooop_run_state_dispatchable_idx ON awooop_run_state (created_at)
    WHERE status IN ('PENDING', 'RESUMED');
CREATE INDEX awooop_run_state_leased_idx ON awooop_run_state (lease_until)
    WHERE status IN ('RUNNING', 'WAITING_TOOL');
CREATE INDEX awooop_run_state_approval_idx ON awooop_run_state (approval_expires_at)
    WHERE status = 'WAITING_APPROVAL';
CREATE INDEX awooop_run_state_project_status_idx ON awooop_run_state (project_id, status);
