-- Channel event idempotency (R-01, R-04).
CREATE TABLE awooop_channel_event_dedupe (
    dedupe_id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id         text NOT NULL,
    channel_type       text NOT NULL CHECK (channel_type IN
                           ('telegram', 'alertmanager', 'gitea', 'line', 'api')),
    provider_event_id  text NOT NULL CHECK (length(provider_event_id) BETWEEN 1 AND 256),
    run_id             uuid NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    expires_at         timestamptz NOT NULL,
    UNIQUE (project_id, channel_type, provider_event_id)
);

-- Expiry deletes the oldest rows in bounded batches through this index, so its cost per
-- batch stays flat however large the table grows.
CREATE INDEX awooop_channel_event_dedupe_expiry_idx ON awooop_channel_event_dedupe (expires_at);
