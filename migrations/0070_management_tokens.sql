-- Management bearer tokens (issue 10). awooop_api_tokens (migration 0010) gains two scopes
-- besides 'ingest':
--   'manage': the management routes (runs, approvals, contracts and revisions) of its own
--              project only;
--   'admin':  the management routes of every project; it belongs to the platform project
--              '__platform__' (created with `awooop tokens create __platform__ --scope admin`).
-- An ingest token names its channel; a management token names none. Management tokens are
-- looked up by token_id on the platform role (an admin token is not a row of the project in
-- the path), so the primary key serves the lookup.
ALTER TABLE awooop_api_tokens
    ADD CONSTRAINT awooop_api_tokens_scope_check2
        CHECK (scope IN ('ingest', 'manage', 'admin')),
    ADD CONSTRAINT awooop_api_tokens_channel_scope_check
        CHECK ((scope = 'ingest') = (channel_type IS NOT NULL)),
    ADD CONSTRAINT awooop_api_tokens_admin_platform_check
        CHECK (scope <> 'admin' OR project_id = '__platform__');
