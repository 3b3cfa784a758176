-- Per-project channel settings and credentials (R-04, R-05).
--
-- awooop_channels: one row per (project, channel). `secret` is the provider's signing secret
-- (Telegram secret token, Gitea webhook secret, LINE channel secret). It is stored as given
-- because verifying an HMAC needs the key itself; access is limited by row-level security
-- and the runtime never logs it. `dedupe_ttl_s` overrides AWOOOP_DEDUPE_TTL_S for this
-- project and channel (NULL: the setting).
CREATE TABLE awooop_channels (
    project_id     text NOT NULL,
    channel_type   text NOT NULL CHECK (channel_type IN
                       ('telegram', 'alertmanager', 'gitea', 'line', 'api')),
    secret         text CHECK (secret IS NULL OR length(secret) BETWEEN 1 AND 1024),
    dedupe_ttl_s   integer CHECK (dedupe_ttl_s IS NULL OR dedupe_ttl_s >= 1),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, channel_type)
);

-- Bearer tokens (Alertmanager and API channels today). A token reads
-- `awp_<token_id>_<secret>`; only sha256(secret) is stored (the secret is 256 random bits,
-- so a fast hash is enough: there is nothing to brute-force). `scope` says what the token
-- may do: 'ingest' (with channel_type) is the only scope the runtime issues so far; later
-- scopes (for example 'admin' or per-project management) add values, not columns.
CREATE TABLE awooop_api_tokens (
    token_id       text PRIMARY KEY CHECK (token_id ~ '^[0-9a-f]{16}$'),
    project_id     text NOT NULL,
    scope          text NOT NULL CHECK (scope ~ '^[a-z][a-z0-9:_-]{0,63}$'),
    channel_type   text CHECK (channel_type IS NULL OR channel_type IN
                       ('telegram', 'alertmanager', 'gitea', 'line', 'api')),
    token_hash     text NOT NULL CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);
CREATE INDEX awooop_api_tokens_project_idx ON awooop_api_tokens (project_id, created_at);

-- Tenant isolation exactly as migrations/0006_row_level_security.sql.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['awooop_channels', 'awooop_api_tokens'] LOOP
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
