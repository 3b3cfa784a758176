-- Revision history per contract (R-32), from the streams revision-<project>/<family>/<contract>.
-- The highest version stored for a stream is the projector's checkpoint for it.
CREATE TABLE awooop_revision_history (
    stream_id             text NOT NULL,
    version               integer NOT NULL CHECK (version >= 1),
    project_id            text NOT NULL,
    contract_family       text NOT NULL,
    contract_id           text NOT NULL,
    event_type            text NOT NULL,
    revision_id           uuid NOT NULL,
    previous_revision_id  uuid,
    body_hash             text,
    actor                 text,
    at                    timestamptz NOT NULL,
    position              bigint NOT NULL,
    trace_id              text,
    PRIMARY KEY (stream_id, version)
);
CREATE INDEX awooop_revision_history_contract_idx
    ON awooop_revision_history (project_id, contract_family, contract_id, version);

-- Tenant isolation (R-43), as every table with a project_id (migration 0040).
SELECT awooop_enforce_tenant_isolation('awooop_revision_history');
