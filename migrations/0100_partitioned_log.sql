-- The event log partitioned by time (the log must not grow without bound).
--
-- awooop_events becomes a table partitioned by RANGE (recorded_at), one partition per
-- AWOOOP_LOG_PARTITION_DAYS (7 by default) from a UTC midnight, named awooop_events_pYYYYMMDD
-- after its first day. Partitions are created ahead of time by the log_partitions
-- loop (awooop/loops/log_partitions.py) through awooop_ensure_log_partitions(); there is no
-- default partition, so that an old partition can be detached CONCURRENTLY (Postgres refuses
-- that while a default partition exists) and so that no row ever lands outside a known range. Few partitions keep the follower reads
-- cheap: a read by (tx_id, position) or by stream visits every partition's index.
--
-- What the partitioning changes:
-- - position comes from a sequence (identity columns on partitioned tables need Postgres 17);
--   the follower order (tx_id, position) and its index are unchanged.
-- - Unique indexes of a partitioned table must contain the partition key, so the primary key
--   is (position, recorded_at) and (stream_id, version) / event_id are plain indexes: the
--   append statements (awooop/log/sql) move the stream head in awooop_event_streams only from
--   the expected version, in the same statement as the insert, so two events of one stream
--   can never share a version; event ids are random uuids that nothing looks up by.
-- - recorded_at is the writing transaction's start (now()), so a transaction that begins
--   before midnight and writes after it lands in the earlier day. The archiver checks that
--   every stream's events in a partition follow its snapshot without a gap, and refuses to
--   archive otherwise (awooop/log/archive.py).
--
-- Rows already in the log are copied into the new table (a fresh database has none).

ALTER TABLE awooop_events RENAME TO awooop_events_unpartitioned;
DROP TRIGGER awooop_events_notify_relay ON awooop_events_unpartitioned;
ALTER INDEX awooop_events_follow_idx RENAME TO awooop_events_unpartitioned_follow_idx;
ALTER INDEX awooop_events_project_idx RENAME TO awooop_events_unpartitioned_project_idx;

CREATE SEQUENCE awooop_event_positions AS bigint;
SELECT setval('awooop_event_positions',
              coalesce((SELECT max(position) FROM awooop_events_unpartitioned), 0) + 1, false);

CREATE TABLE awooop_events (
    position     bigint NOT NULL DEFAULT nextval('awooop_event_positions'),
    tx_id        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    event_id     uuid NOT NULL,
    stream_id    text NOT NULL,
    version      integer NOT NULL CHECK (version >= 1),
    project_id   text NOT NULL,
    event_type   text NOT NULL,
    data         jsonb NOT NULL,
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (position, recorded_at)
) PARTITION BY RANGE (recorded_at);
ALTER SEQUENCE awooop_event_positions OWNED BY awooop_events.position;
GRANT USAGE, SELECT ON SEQUENCE awooop_event_positions
    TO awooop_app, awooop_platform, awooop_producer;

CREATE INDEX awooop_events_follow_idx ON awooop_events (tx_id, position);
CREATE INDEX awooop_events_project_idx ON awooop_events (project_id, position);
CREATE INDEX awooop_events_stream_idx ON awooop_events (stream_id, version);

-- Archived partitions (awooop/log/archive.py): one row per partition written to a file and
-- dropped. The file's checksum is kept here too, so a replay from the archive can tell a
-- changed or missing file from the catalogue alone.
CREATE TABLE awooop_log_archives (
    partition_name  text PRIMARY KEY,
    range_from      timestamptz NOT NULL,
    range_to        timestamptz NOT NULL,
    events          bigint NOT NULL,
    first_position  bigint,
    last_position   bigint,
    file_name       text NOT NULL,
    sha256          text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    archived_at     timestamptz NOT NULL DEFAULT now()
);

-- Per stream whose first events are archived: the version and position of its last archived
-- event and, for run streams, the run's state folded over every archived event (the JSON of
-- awooop.log.state.RunState). A replay without the archive starts such a run from here; other
-- streams (state NULL) need the archive (`awooop replay ... --from-archive DIR`).
CREATE TABLE awooop_stream_snapshots (
    stream_id   text PRIMARY KEY,
    project_id  text NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    position    bigint NOT NULL,
    state       jsonb,
    taken_at    timestamptz NOT NULL DEFAULT now()
);
SELECT awooop_enforce_tenant_isolation('awooop_stream_snapshots');
REVOKE ALL ON awooop_log_archives FROM awooop_app;
GRANT SELECT ON awooop_log_archives TO awooop_platform;

-- The partitions of the log, oldest first, with their ranges (for the loop, doctor and tests).
CREATE VIEW awooop_log_partitions AS
SELECT c.relname::text AS partition_name,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz
           AS range_from,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
           AS range_to
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'awooop_events'::regclass;
GRANT SELECT ON awooop_log_partitions TO awooop_platform;

-- Extends the log's partitions, each `days` long, so that they cover [from_at, to_at): forward
-- from the newest partition's end and backward from the oldest one's start (never into a range
-- that was archived); the first partition starts at from_at's UTC day. Returns how many it
-- created. A partition is created as a plain table and then attached, which takes only a
-- SHARE UPDATE EXCLUSIVE lock on the log: writers and readers go on. SECURITY DEFINER: the
-- loop runs as awooop_platform, which may not create tables.
CREATE FUNCTION awooop_ensure_log_partitions(from_at timestamptz, to_at timestamptz, days integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    span interval := make_interval(days => days);
    low timestamptz;
    high timestamptz;
    floor_at timestamptz;
    created integer := 0;
BEGIN
    IF days IS NULL OR days < 1 THEN
        RAISE EXCEPTION 'E-LOG-001: partition length must be at least one day, not %', days;
    END IF;
    SELECT min(range_from), max(range_to) INTO low, high FROM awooop_log_partitions;
    IF low IS NULL THEN
        low := date_trunc('day', from_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
        high := low;
    END IF;
    SELECT max(range_to) INTO floor_at FROM awooop_log_archives;
    WHILE high < to_at LOOP
        PERFORM awooop_create_log_partition(high, high + span);
        high := high + span;
        created := created + 1;
    END LOOP;
    WHILE low > from_at AND (floor_at IS NULL OR low - span >= floor_at) LOOP
        PERFORM awooop_create_log_partition(low - span, low);
        low := low - span;
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;

CREATE FUNCTION awooop_create_log_partition(range_from timestamptz, range_to timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    part text := 'awooop_events_p' || to_char(range_from AT TIME ZONE 'UTC', 'YYYYMMDD');
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE awooop_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   part);
    EXECUTE format('ALTER TABLE awooop_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   part, range_from, range_to);
    -- Forced row-level security like every tenant table, and no grant at all: the log is read
    -- and written through awooop_events only, whose policies are the ones that apply.
    PERFORM awooop_enforce_tenant_isolation(part::regclass);
    EXECUTE format('REVOKE ALL ON %I FROM awooop_app, awooop_platform, awooop_producer', part);
END
$$;
REVOKE ALL ON FUNCTION awooop_create_log_partition(timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION awooop_ensure_log_partitions(timestamptz, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_ensure_log_partitions(timestamptz, timestamptz, integer)
    TO awooop_platform;

-- Weekly partitions from the oldest event (or now) to a week ahead; the loop keeps extending
-- them with AWOOOP_LOG_PARTITION_DAYS.
SELECT awooop_ensure_log_partitions(
    coalesce((SELECT min(recorded_at) FROM awooop_events_unpartitioned), now()),
    now() + interval '7 days', 7);

INSERT INTO awooop_events
    (position, tx_id, event_id, stream_id, version, project_id, event_type, data, metadata,
     recorded_at)
SELECT position, tx_id, event_id, stream_id, version, project_id, event_type, data, metadata,
       recorded_at
FROM awooop_events_unpartitioned;
DROP TABLE awooop_events_unpartitioned;

-- Grants, row-level security and the producer's policy, as on the table this replaces
-- (0006, 0040, 0090).
SELECT awooop_enforce_tenant_isolation('awooop_events');
GRANT SELECT, INSERT ON awooop_events TO awooop_producer;
CREATE POLICY producer_writes ON awooop_events AS RESTRICTIVE FOR INSERT TO awooop_producer
    WITH CHECK (stream_id LIKE 'domain/%' OR (event_type = 'RunCreated' AND version = 1));

CREATE TRIGGER awooop_events_notify_relay
    AFTER INSERT ON awooop_events
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_notify_relay_events();
