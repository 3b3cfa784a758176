-- phase: expand
--
-- The fleet's processes, by release. Every long-running process (serve, worker, relay,
-- projector, loops, up) writes its row when it starts on a schema it can run on, refreshes
-- seen_at every recheck_s seconds while it runs and deletes the row when it stops
-- (awooop/core/processes.py). A row is live while seen_at is within three of its own
-- recheck_s; rows of processes that died are ignored once stale, and pruned.
--
-- `awooop migrate` holds back a contract migration that would raise the schema floor above a
-- live process's release, and `awooop migrate --check` names the processes it would stop.
-- awooop_live_workers() counts the live worker processes for blocked_on: a worker's own
-- heartbeat says it reads the work streams, on every Redis version (XINFO CONSUMERS' idle time
-- is not reset by a read that returns nothing on Redis 7.0). Tenants get the count, not rows.
--
-- A new table, a function and their grants: nothing else is locked, and the previous release
-- never reads them.
CREATE TABLE awooop_processes (
    instance    text PRIMARY KEY CHECK (length(instance) BETWEEN 1 AND 200),
    kind        text NOT NULL CHECK (length(kind) BETWEEN 1 AND 40),
    host        text NOT NULL CHECK (length(host) <= 255),
    pid         integer NOT NULL,
    release     text NOT NULL CHECK (length(release) BETWEEN 1 AND 200),
    recheck_s   double precision NOT NULL CHECK (recheck_s > 0),
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON awooop_processes TO awooop_platform;

CREATE FUNCTION awooop_live_workers() RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT count(*) FROM public.awooop_processes p
            WHERE p.kind IN ('worker', 'up')
              AND p.seen_at >= now() - make_interval(secs => 3 * p.recheck_s));
END
$$;
REVOKE ALL ON FUNCTION awooop_live_workers() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_live_workers() TO awooop_app, awooop_platform;
