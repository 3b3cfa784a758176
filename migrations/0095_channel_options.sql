-- Per-channel options that change how a provider's deliveries are read (docs/ingest.md).
-- NULL means the default (awooop.ingest.common.ChannelOptions); `awooop channels set-option`
-- writes them, `awooop channels list` shows them.
--
-- gitea_key: what keys a Gitea event. 'body' (the default): the sha256 of the signed JSON
--   payload, so that Gitea's "replay" (the same payload under a new X-Gitea-Delivery) is the
--   same event; 'delivery': the X-Gitea-Delivery header, every replay a new run.
-- max_event_age_s: LINE events whose signed timestamp is older are refused (E-INGEST-003).
-- max_redelivery_age_s: the same for events LINE flags as redelivered.
ALTER TABLE awooop_channels
    ADD COLUMN gitea_key text
        CHECK (gitea_key IS NULL OR gitea_key IN ('body', 'delivery')),
    ADD COLUMN max_event_age_s integer
        CHECK (max_event_age_s IS NULL OR max_event_age_s >= 1),
    ADD COLUMN max_redelivery_age_s integer
        CHECK (max_redelivery_age_s IS NULL OR max_redelivery_age_s >= 1);
