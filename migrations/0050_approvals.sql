-- Approval tokens (R-14). A run in WAITING_APPROVAL has one open row here per request. The
-- token itself is never stored: token_hash is the SHA-256 (hex) of the random token handed to
-- the approver once. A decision (approved, rejected, expired) sets used_at; a token is used at
-- most once. No foreign key to awooop_run_state: the replay tool rebuilds and swaps that table.
CREATE TABLE awooop_approvals (
    approval_id   uuid PRIMARY KEY,
    project_id    text NOT NULL,
    run_id        uuid NOT NULL,
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    attempt       integer NOT NULL CHECK (attempt >= 1),
    token_hash    text NOT NULL UNIQUE CHECK (length(token_hash) = 64),
    reason        text NOT NULL DEFAULT '',
    requested_at  timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    used_at       timestamptz,
    decision      text CHECK (decision IN ('approved', 'rejected', 'expired')),
    actor         text,
    CHECK ((used_at IS NULL) = (decision IS NULL))
);

-- A resumed attempt looks up the decision for (run, name); the expiry loop scans open rows.
CREATE INDEX awooop_approvals_run_idx ON awooop_approvals (run_id, name, requested_at);
CREATE INDEX awooop_approvals_open_idx ON awooop_approvals (expires_at) WHERE used_at IS NULL;

-- Tenant isolation (R-43) with the helper of migration 0040.
SELECT awooop_enforce_tenant_isolation('awooop_approvals');
