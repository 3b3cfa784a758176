-- Outbox relay state (streams: R-22, R-31, R-33). Platform tables without project_id: only the
-- relay (role awooop_platform) reads and writes them, so no row-level security; the app role
-- gets no access at all.

-- The relay's position in awooop_events: the last (tx_id, position) published to Redis (see
-- migrations/0002_event_log.sql for why that order never skips a late commit). Advanced only
-- after the XADDs succeeded, in a statement of its own: a crash in between republishes the
-- batch (duplicates), it never skips it. relay_attempts counts publish attempts (batches),
-- relay_failures the ones Redis refused.
CREATE TABLE awooop_relay_cursor (
    name            text PRIMARY KEY,
    tx_id           bigint NOT NULL DEFAULT 0,
    position        bigint NOT NULL DEFAULT 0,
    published       bigint NOT NULL DEFAULT 0,
    relay_attempts  bigint NOT NULL DEFAULT 0,
    relay_failures  bigint NOT NULL DEFAULT 0,
    last_error      text,
    leader          text,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
INSERT INTO awooop_relay_cursor (name) VALUES ('events');

-- Per shard (for a given shard count): the safe replay point, below which every consumer
-- group of the shard's streams had acknowledged everything when the relay last looked (NULL:
-- unknown, nothing to replay), and the epoch of the shard's Redis data. After Redis loses the
-- shard, the relay republishes the shard's events from the safe point.
CREATE TABLE awooop_relay_shards (
    shard_count    integer NOT NULL,
    shard          integer NOT NULL,
    safe_tx_id     bigint,
    safe_position  bigint,
    epoch          text,
    resets         integer NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard_count, shard)
);

REVOKE ALL ON awooop_relay_cursor, awooop_relay_shards FROM awooop_app;
GRANT SELECT, INSERT, UPDATE ON awooop_relay_cursor, awooop_relay_shards TO awooop_platform;

-- Wake the relay at commit: one notification per inserting statement (and Postgres folds equal
-- notifications of one transaction into one). The payload names the table, so the relay knows
-- whether to look at the contract outbox. The relay also polls (AWOOOP_RELAY_POLL_INTERVAL_S),
-- so a lost notification only delays.
CREATE FUNCTION awooop_notify_relay() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('awooop_relay', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER awooop_events_notify_relay
    AFTER INSERT ON awooop_events
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_notify_relay();

CREATE TRIGGER awooop_contract_outbox_notify_relay
    AFTER INSERT ON awooop_contract_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_notify_relay();
