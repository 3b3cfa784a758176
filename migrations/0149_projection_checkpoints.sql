-- phase: expand
--
-- Checkpoints of the projections that services register (docs/consumers.md): for each
-- registered projection and each event stream it follows, the version of the last event of
-- that stream it has applied. The projector writes the row in the same transaction as the
-- projection's own view rows, so a view and its checkpoint never disagree; the replay tool
-- rewrites a projection's rows in the transaction that swaps its rebuilt view in. (The built-in
-- projections keep their checkpoint in their own views.)
--
-- A project's own rows (row-level security, as every table with a project_id): a tenant sees
-- the checkpoints of its own streams; the projector and the replay tool write as the platform.
--
-- A new table: nothing else is locked, and the previous release never reads or writes it.
CREATE TABLE awooop_projection_checkpoints (
    projection  text NOT NULL,
    stream_id   text NOT NULL,
    project_id  text NOT NULL,
    version     bigint NOT NULL CHECK (version >= 1),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, stream_id)
);
SELECT awooop_enforce_tenant_isolation('awooop_projection_checkpoints');
