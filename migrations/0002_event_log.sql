-- The append-only event log (R-30).
--
-- Ordering for followers: every row records the id of the transaction that wrote it
-- (tx_id, xid8). A follower reads only rows whose tx_id is below the xmin of its own
-- snapshot: every transaction with a smaller id has already committed or aborted, so no row
-- can later appear behind the follower's cursor. Followers walk (tx_id, position) in order.
-- Writers are never serialised; a follower only waits for transactions older than the
-- events it reads. Per stream, awooop_event_streams.last_tx_id makes the append refuse a
-- writer whose transaction id is older than the stream's previous writer (E-EVENT-002,
-- retried by the write path), so within a stream (tx_id, position) order is version order.
CREATE TABLE awooop_event_streams (
    stream_id   text PRIMARY KEY,
    project_id  text NOT NULL,
    version     integer NOT NULL CHECK (version >= 0),
    last_tx_id  xid8 NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE awooop_events (
    position     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    event_id     uuid NOT NULL UNIQUE,
    stream_id    text NOT NULL,
    version      integer NOT NULL CHECK (version >= 1),
    project_id   text NOT NULL,
    event_type   text NOT NULL,
    data         jsonb NOT NULL,
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (stream_id, version)
);

CREATE INDEX awooop_events_follow_idx ON awooop_events (tx_id, position);
CREATE INDEX awooop_events_project_idx ON awooop_events (project_id, position);
