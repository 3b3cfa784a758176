-- The run console (issue 22): a read-only token scope, browser sessions, and the indexes the
-- console's run list and the awooop_runs_blocked gauge read through.

-- 1. 'read': the console's pages and the GET management routes, never a change. A read token
--    of a project sees that project; one of the platform project '__platform__' sees all.
ALTER TABLE awooop_api_tokens DROP CONSTRAINT awooop_api_tokens_scope_check2;
ALTER TABLE awooop_api_tokens
    ADD CONSTRAINT awooop_api_tokens_scope_check3
        CHECK (scope IN ('ingest', 'read', 'manage', 'admin'));

-- 2. Console sessions: a browser logs in once with a management token and gets a cookie with
--    a random session secret; only its SHA-256 is stored. csrf_token is echoed in every form
--    and compared on every POST (the synchronizer-token pattern). A session lives until
--    expires_at or until its token is revoked (every request joins the live token row).
--    No project_id column on purpose: the platform role reads it by its key, like the tokens.
CREATE TABLE awooop_console_sessions (
    session_hash  text PRIMARY KEY CHECK (session_hash ~ '^[0-9a-f]{64}$'),
    token_id      text NOT NULL,
    csrf_token    text NOT NULL CHECK (length(csrf_token) BETWEEN 32 AND 128),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);
CREATE INDEX awooop_console_sessions_expiry_idx ON awooop_console_sessions (expires_at);
REVOKE ALL ON awooop_console_sessions FROM PUBLIC, awooop_app;
GRANT SELECT, INSERT, DELETE ON awooop_console_sessions TO awooop_platform;

-- 3. The console's run list (awooop/runs/listing.py) and the bulk actions' batches and preview
--    (awooop/runs/bulk.py): newest first by created_at, read one status at a time (a LATERAL
--    per status, at most one page each, then the newest page of those), so a page is at most
--    eight short backward index scans with keyset pagination, also among a million runs.
--    Every run update changes status, so it is never HOT: each index of awooop_run_state
--    takes an entry on every claim and completion. Hence the fewest indexes that keep every
--    filter indexed:
--    - (status, created_at, run_id): the list without a project (no filter, status, channel,
--      since, blocked_on: the statuses of the reason).
--    - (project_id, status, created_at, run_id): the same with a project. It replaces 0003's
--      (project_id, status), whose readers it serves as well (a prefix of it): runs list
--      --project/--status, the projections' counts; the stats sample and the blocked_on gauge
--      read the partial indexes of 0003 and 4. below.
--    - (provider_event_id): finding a run by its idempotency key (the provider's event id),
--      also after its dedupe row expired. By run id is the primary key.
--    A (created_at) index for the unfiltered list and a (project_id, created_at) one are not
--    needed: the per-status walk serves those filters through the two above.
DROP INDEX awooop_run_state_project_status_idx;
CREATE INDEX awooop_run_state_project_status_created_idx
    ON awooop_run_state (project_id, status, created_at DESC, run_id DESC);
CREATE INDEX awooop_run_state_status_created_idx
    ON awooop_run_state (status, created_at DESC, run_id DESC);
CREATE INDEX awooop_run_state_provider_event_idx ON awooop_run_state (provider_event_id);

-- 4. FAILED runs per project and failure code (awooop_runs_blocked: failed or
--    failed_dead_lettered) as an index-only count; only FAILED rows are in it, so a claim or
--    a completion adds nothing to it (only a failure does).
CREATE INDEX awooop_run_state_failed_idx ON awooop_run_state (project_id, failure_code)
    WHERE status = 'FAILED';
