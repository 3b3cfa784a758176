-- The dedupe table partitioned by time (the table must not grow without bound, and dropping a
-- week of keys must not cost a DELETE per row).
--
-- Postgres keeps a unique index unique only within a partition, and uniqueness of
-- (project_id, channel_type, provider_event_id) is the dedupe guarantee. So the partition key
-- is part of the key: a row belongs to a WINDOW, a fixed 7-day bin of the clock
-- (awooop_dedupe_window(at), bins from Monday 2000-01-03 UTC; the width is fixed because a
-- row's window must never be recomputed differently), and the table is partitioned by RANGE
-- (window_start), one partition per window, named awooop_channel_event_dedupe_pYYYYMMDD.
-- A first delivery at time t claims its key in TWO windows, win(t) and the next one, with
-- one INSERT ... ON CONFLICT DO NOTHING (awooop/log/sql/ingest_new.sql):
--
-- - two deliveries of a key in the same window collide on win(t)'s row;
-- - two deliveries that straddle a window boundary (now() in w and in w + 7 days) collide on
--   the second one's current window, which the first one also claimed;
-- - a delivery that claimed only one of its two windows lost a race: it deletes its own half
--   (by its run id, in the same transaction) and reads the winner's row.
--
-- A key whose TTL (per channel: awooop_channels.dedupe_ttl_s) outlasts the two windows is still
-- found: before claiming, the statement probes the older windows back to win(now() - TTL) for
-- a row that has not expired. Those rows were committed by transactions whose clock was in an
-- older window, i.e. more than a week ago; only a transaction open for over a week could race
-- with that probe.
--
-- Expired rows count as absent as before (the next delivery of the key deletes them). Nothing
-- deletes rows one by one any more: the dedupe_expiry loop (awooop/loops/dedupe_expiry.py)
-- creates windows ahead and detaches and drops a window's partition once every row in it has
-- expired. Rows of the unpartitioned table that had not expired are copied into the window of
-- their created_at (one row each: no ingest runs during the migration, so no race to close).

CREATE FUNCTION awooop_dedupe_window(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN date_bin(interval '7 days', at, timestamptz '2000-01-03 00:00:00+00');

ALTER TABLE awooop_channel_event_dedupe RENAME TO awooop_channel_event_dedupe_unpartitioned;
ALTER INDEX awooop_channel_event_dedupe_pkey
    RENAME TO awooop_channel_event_dedupe_unpartitioned_pkey;
ALTER INDEX awooop_channel_event_dedupe_expiry_idx
    RENAME TO awooop_channel_event_dedupe_unpartitioned_expiry_idx;
ALTER INDEX awooop_channel_event_dedupe_project_id_channel_type_provide_key
    RENAME TO awooop_channel_event_dedupe_unpartitioned_key;

CREATE TABLE awooop_channel_event_dedupe (
    dedupe_id          uuid NOT NULL DEFAULT gen_random_uuid(),  -- one per row (R-01)
    project_id         text NOT NULL,
    channel_type       text NOT NULL CHECK (channel_type IN
                           ('telegram', 'alertmanager', 'gitea', 'line', 'api')),
    provider_event_id  text NOT NULL CHECK (length(provider_event_id) BETWEEN 1 AND 256),
    window_start       timestamptz NOT NULL CHECK (window_start = awooop_dedupe_window(window_start)),
    run_id             uuid NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    expires_at         timestamptz NOT NULL,
    PRIMARY KEY (project_id, channel_type, provider_event_id, window_start)
) PARTITION BY RANGE (window_start);

-- The range partitions of a table by time, read from the catalogue: the log's view (0100) and
-- the windows' view below both list them through this one function.
CREATE FUNCTION awooop_partition_ranges(parent regclass)
RETURNS TABLE (partition_name text, range_from timestamptz, range_to timestamptz,
               detach_pending boolean)
LANGUAGE sql STABLE AS $$
SELECT c.relname::text,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz,
       i.inhdetachpending
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = parent
$$;

-- COLLATE "C": the collation the view's column had (a relation name's), which a replaced view
-- must keep.
CREATE OR REPLACE VIEW awooop_log_partitions AS
SELECT partition_name COLLATE "C" AS partition_name, range_from, range_to
FROM awooop_partition_ranges('awooop_events');

-- The windows' partitions (for the loop, doctor and tests); a window being detached is gone.
CREATE VIEW awooop_dedupe_partitions AS
SELECT partition_name COLLATE "C" AS partition_name, range_from, range_to
FROM awooop_partition_ranges('awooop_channel_event_dedupe')
WHERE NOT detach_pending;
GRANT SELECT ON awooop_dedupe_partitions TO awooop_platform;

CREATE FUNCTION awooop_create_dedupe_partition(window_from timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    part text := 'awooop_channel_event_dedupe_p'
                 || to_char(window_from AT TIME ZONE 'UTC', 'YYYYMMDD');
BEGIN
    IF window_from <> awooop_dedupe_window(window_from) THEN
        RAISE EXCEPTION 'E-LOG-001: % is not the start of a dedupe window', window_from;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE awooop_channel_event_dedupe '
                   'INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
    EXECUTE format('ALTER TABLE awooop_channel_event_dedupe ATTACH PARTITION %I '
                   'FOR VALUES FROM (%L) TO (%L)',
                   part, window_from, window_from + interval '7 days');
    -- Forced row-level security and no grant, as the log's partitions: the rows are read and
    -- written through awooop_channel_event_dedupe only, whose policies apply.
    PERFORM awooop_enforce_tenant_isolation(part::regclass);
    EXECUTE format('REVOKE ALL ON %I FROM awooop_app, awooop_platform, awooop_producer', part);
END
$$;

-- Creates every missing window partition from the window of from_at to the window of to_at,
-- both included; returns how many. Attaching takes SHARE UPDATE EXCLUSIVE on the table only:
-- ingest goes on. SECURITY DEFINER: the loop runs as awooop_platform.
CREATE FUNCTION awooop_ensure_dedupe_partitions(from_at timestamptz, to_at timestamptz)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    w timestamptz := awooop_dedupe_window(from_at);
    created integer := 0;
BEGIN
    WHILE w <= awooop_dedupe_window(to_at) LOOP
        IF NOT EXISTS (SELECT 1 FROM awooop_dedupe_partitions p WHERE p.range_from = w) THEN
            PERFORM awooop_create_dedupe_partition(w);
            created := created + 1;
        END IF;
        w := w + interval '7 days';
    END LOOP;
    RETURN created;
END
$$;
REVOKE ALL ON FUNCTION awooop_create_dedupe_partition(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION awooop_ensure_dedupe_partitions(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_ensure_dedupe_partitions(timestamptz, timestamptz)
    TO awooop_platform;

-- The live rows' windows, and four windows ahead of the clock (the loop keeps extending).
SELECT awooop_ensure_dedupe_partitions(
    coalesce((SELECT min(created_at) FROM awooop_channel_event_dedupe_unpartitioned
              WHERE expires_at > now()), now()),
    now() + interval '28 days');

INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, window_start, run_id, created_at, expires_at)
SELECT project_id, channel_type, provider_event_id, awooop_dedupe_window(created_at), run_id,
       created_at, expires_at
FROM awooop_channel_event_dedupe_unpartitioned
WHERE expires_at > now();
DROP TABLE awooop_channel_event_dedupe_unpartitioned;

-- Grants and row-level security as on the table this replaces (0006, 0040, 0090).
SELECT awooop_enforce_tenant_isolation('awooop_channel_event_dedupe');
GRANT SELECT, INSERT, DELETE ON awooop_channel_event_dedupe TO awooop_producer;
