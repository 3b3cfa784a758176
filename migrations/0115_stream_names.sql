-- Stream names belong to their project (R-43).
--
-- awooop_event_streams is keyed by stream_id alone, and the producer policies (0090) checked
-- only a row's project_id: a producer login bound to one project could write the head
-- `domain/<other>/x` or `revision-<other>/...` with its own project_id, and events under
-- those names. The other project's own append then met a row its policies hide (its revision
-- create and its emit failed), the forged events reached the events streams under the other
-- project's stream name, and the unique key told the forger whether a name was in use.
--
-- The rule, for every role (a CHECK, so the platform role and the tables' owner are held to
-- it too): a stream's name says whose it is.
--   run-<uuid>                    a run's stream (awooop.core.events.run_stream_id);
--   domain/<project>/<name>       a producer's domain stream (awooop.producer.domain_stream_id);
--   revision-<project>/<...>      a contract's revision stream (revision_stream_id);
-- and no other name. Project ids never contain '/' (awooop.ingest.credentials.check_project_id,
-- 0090's CHECK on grants), so the project in a name is the text up to the next '/'.
-- awooop.core.events.stream_of_project is the same rule in Python, checked by the event log's
-- functions before they write (so the caller gets E-EVENT-004, not a constraint violation).
--
-- A run's name carries no project: for producer logins, the restrictive policies below also
-- require that a run stream's head and its RunCreated belong to a run of the row's project
-- (awooop_run_of_project). The runtime's own roles derive every run stream name from the run
-- row they have just written or locked, and the replay tool and its benchmark load heads
-- before any run row exists, so the runtime's roles are not asked (no lookup on their path).
--
-- A name of another project is therefore refused the same way whether that project uses it
-- or not: the CHECK and the policies are evaluated before the unique key is (Postgres checks
-- a new row's WITH CHECK policies, then its constraints, then the indexes, also for
-- INSERT ... ON CONFLICT), and a producer sees no head or event of another project.
--
-- The rule as one function: IMMUTABLE plain SQL, so Postgres inlines it into the CHECK
-- expressions: a few string comparisons per row written, no lookup. A run's name is checked for
-- the shape of a uuid with LIKE, not with a regular expression: on this machine the regular
-- expression cost 3.5 us a row (1M names: 3.6 s against 0.1 s for the scan alone), LIKE
-- 0.1 us; the head of a run is updated at every claim and completion, and every event is a
-- new row. The stricter uuid check is awooop_run_of_project's, on the producer's path only.
CREATE FUNCTION awooop_stream_of_project(stream_id text, project_id text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN starts_with(stream_id, 'run-') THEN
            stream_id LIKE 'run-________-____-____-____-____________'
        WHEN starts_with(stream_id, 'domain/') THEN
            starts_with(stream_id, 'domain/' || project_id || '/')
            AND length(stream_id) > length(project_id) + 8
        WHEN starts_with(stream_id, 'revision-') THEN
            starts_with(stream_id, 'revision-' || project_id || '/')
            AND length(stream_id) > length(project_id) + 10
        ELSE false
    END
$$;

-- Whether stream_id is the stream of a run of project_id that the caller can see. VOLATILE on
-- purpose: a volatile function's query sees the rows its own statement wrote so far, and the
-- ingest statement (awooop/log/sql/ingest_new.sql) inserts the run row in the same statement
-- as its head and its RunCreated, the head and event rows only after the run's (they are
-- selected from the run insert's RETURNING). A STABLE function would see the statement's
-- snapshot, without the new run.
CREATE FUNCTION awooop_run_of_project(stream text, project text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF stream !~ '^run-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT FROM public.awooop_run_state r
                   WHERE r.run_id = substr(stream, 5)::uuid AND r.project_id = project);
END
$$;
REVOKE ALL ON FUNCTION awooop_run_of_project(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_run_of_project(text, text)
    TO awooop_producer, awooop_app, awooop_platform;

-- Existing heads that break the rule (a forged head of another project's name, or a name of
-- no known form) are moved out of the way, so the project whose name it is can use it; the
-- rows are kept here for the operator (platform role only). Their events stay in the log,
-- which is append-only history (see the CHECK on awooop_events below).
CREATE TABLE awooop_quarantined_stream_heads (
    stream_id       text NOT NULL,
    written_for     text NOT NULL,  -- the head's project_id
    version         integer NOT NULL,
    last_tx_id      xid8 NOT NULL,
    updated_at      timestamptz NOT NULL,
    quarantined_at  timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON awooop_quarantined_stream_heads FROM PUBLIC, awooop_app, awooop_platform;
GRANT SELECT ON awooop_quarantined_stream_heads TO awooop_platform;

WITH moved AS (
    DELETE FROM awooop_event_streams s
    WHERE NOT awooop_stream_of_project(s.stream_id, s.project_id)
    RETURNING s.*
)
INSERT INTO awooop_quarantined_stream_heads (stream_id, written_for, version, last_tx_id,
                                             updated_at)
SELECT stream_id, project_id, version, last_tx_id, updated_at FROM moved;

-- The heads are checked, existing rows included: one row per stream (about one per run), and
-- the scan runs under the ACCESS EXCLUSIVE lock that adding a CHECK takes for the rest of this
-- migration's transaction (NOT VALID followed by VALIDATE in the same transaction would take
-- the same lock for the same scan: the migrator runs each file in one transaction). Measured
-- on the 2-core machine with 1.2M heads: 0.3-0.6 s for this scan, 0.4-0.6 s for the move above
-- (which blocks only writers of the rows it moves).
ALTER TABLE awooop_event_streams
    ADD CONSTRAINT awooop_event_streams_stream_of_project
    CHECK (awooop_stream_of_project(stream_id, project_id));

-- The log is checked for every row written from now on (NOT VALID: no scan, so the lock is
-- held only for the catalog change; validating hundreds of millions of rows under this
-- transaction's ACCESS EXCLUSIVE lock would stop every writer for minutes). Rows written
-- before stay as they were; `ALTER TABLE awooop_events VALIDATE CONSTRAINT
-- awooop_events_stream_of_project`, run at any later time in its own transaction, checks them
-- under a SHARE UPDATE EXCLUSIVE lock (writers go on) and, should a forged row be there, fails
-- naming its partition.
-- Partitions created later copy the constraint (LIKE ... INCLUDING CONSTRAINTS, 0100).
ALTER TABLE awooop_events
    ADD CONSTRAINT awooop_events_stream_of_project
    CHECK (awooop_stream_of_project(stream_id, project_id)) NOT VALID;

-- Producer logins (restrictive, ANDed with 0090's): a run stream's head and its RunCreated only
-- for a run of the row's project; a producer no longer writes any other non-domain head.
ALTER POLICY producer_inserts ON awooop_event_streams
    WITH CHECK (stream_id LIKE 'domain/%'
                OR (version = 1 AND awooop_run_of_project(stream_id, project_id)));
ALTER POLICY producer_writes ON awooop_events
    WITH CHECK (stream_id LIKE 'domain/%'
                OR (event_type = 'RunCreated' AND version = 1
                    AND awooop_run_of_project(stream_id, project_id)));
