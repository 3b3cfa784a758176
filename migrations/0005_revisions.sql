-- Contract revisions, the active pointer and the contract outbox (R-20, ADR-113).
CREATE TABLE awooop_contract_revisions (
    revision_id      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id       text NOT NULL,
    contract_family  text NOT NULL,
    contract_id      text NOT NULL,
    body             jsonb NOT NULL,
    body_hash        text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX awooop_contract_revisions_contract_idx
    ON awooop_contract_revisions (project_id, contract_family, contract_id, created_at);

CREATE TABLE awooop_active_revisions (
    project_id          text NOT NULL,
    contract_family     text NOT NULL,
    contract_id         text NOT NULL,
    active_revision_id  uuid NOT NULL REFERENCES awooop_contract_revisions (revision_id),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, contract_family, contract_id)
);

CREATE TABLE awooop_contract_outbox (
    event_id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_type       text NOT NULL,
    project_id       text NOT NULL,
    contract_family  text NOT NULL,
    contract_id      text NOT NULL,
    old_revision_id  uuid,
    new_revision_id  uuid NOT NULL REFERENCES awooop_contract_revisions (revision_id),
    traceparent      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    relay_attempts   integer NOT NULL DEFAULT 0
);
CREATE INDEX awooop_contract_outbox_undelivered_idx ON awooop_contract_outbox (created_at)
    WHERE delivered_at IS NULL;
