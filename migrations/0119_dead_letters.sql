-- Dead letters in Postgres: one row per message that the runtime gave up delivering (R-16,
-- R-19). Postgres is the truth; Redis keeps no dead-letter stream (awooop/log/deadletters.py).
--
-- A run's dead letter is written in the same transaction as the RunFailed event that
-- dead-lettered it (run_version is that event's version in the run's stream: the occurrence),
-- so it exists exactly when the event does. A message without a run (an entry no consumer
-- could decode) belongs to the platform project '__platform__'; only the platform role reads
-- it. A dead letter is resolved, never deleted: by a re-drive (redriven), by a re-drive that
-- found nothing to put back to work (discarded), or by any later RunRetried of its run
-- (retried), in the transaction that writes that event. So a run has at most one open dead
-- letter, and a successful retry never leaves one open.
CREATE TABLE awooop_dead_letters (
    dead_letter_id    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id        text NOT NULL,
    run_id            uuid,                      -- null: a message without a run
    run_version       integer,                   -- the RunFailed's version in run-<run_id>
    source            text NOT NULL CHECK (source IN ('work', 'events')),  -- which stream
    group_name        text NOT NULL DEFAULT '',  -- the consumer group that gave up ('': none did)
    source_entry_id   text NOT NULL DEFAULT '',  -- the Redis entry, when a delivery gave up
    delivery_count    integer NOT NULL DEFAULT 0 CHECK (delivery_count >= 0),
    event_type        text NOT NULL DEFAULT '',  -- the message's event ('' if undecodable)
    code              text NOT NULL DEFAULT '',  -- the run's failure code
    reason            text NOT NULL,
    message           bytea,                     -- the envelope bytes a consumer could not use
    dead_lettered_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at       timestamptz,
    resolution        text CHECK (resolution IN ('redriven', 'discarded', 'retried')),
    resolved_by       text,                      -- the actor (cli:<user>, <scope>-token:<id>)
    CHECK ((resolved_at IS NULL) = (resolution IS NULL)),
    CHECK ((run_id IS NULL) = (run_version IS NULL))
);
-- The occurrence: duplicates of one dead-lettering (a retried transaction, a give-up
-- repeated after a crash) make one row. Run ids are unique across projects, so these run-keyed
-- indexes need no project_id: an equality on run_id is then a probe the planner cannot
-- misjudge under row-level security (the tenant qual is checked on the one row it finds).
CREATE UNIQUE INDEX awooop_dead_letters_occurrence_idx
    ON awooop_dead_letters (run_id, run_version) WHERE run_id IS NOT NULL;
-- At most one open dead letter per run; blocked_on and the run page look runs up by it.
CREATE UNIQUE INDEX awooop_dead_letters_open_run_idx
    ON awooop_dead_letters (run_id) WHERE run_id IS NOT NULL AND resolved_at IS NULL;
-- A message without a run: one open row per undecodable entry of a group.
CREATE UNIQUE INDEX awooop_dead_letters_open_entry_idx
    ON awooop_dead_letters (source, group_name, source_entry_id)
    WHERE run_id IS NULL AND resolved_at IS NULL;
-- Lists, newest first: a project's open ones (console, CLI, alert), everyone's open ones
-- (platform CLI, the stats loop), a project's history.
CREATE INDEX awooop_dead_letters_project_open_idx
    ON awooop_dead_letters (project_id, dead_lettered_at DESC, dead_letter_id DESC)
    WHERE resolved_at IS NULL;
CREATE INDEX awooop_dead_letters_open_idx
    ON awooop_dead_letters (dead_lettered_at DESC, dead_letter_id DESC) WHERE resolved_at IS NULL;
CREATE INDEX awooop_dead_letters_project_idx
    ON awooop_dead_letters (project_id, dead_lettered_at DESC, dead_letter_id DESC);
-- The dead letters that lived in Redis until this migration, rebuilt from the log's truth:
-- every run that is FAILED because its work was dead-lettered (E-RUN-004: its last attempt's
-- lease expired; E-RUN-005: its message was delivered too often) and not retried since has an
-- open dead letter; its RunFailed is the run's last event (version). The table's owner reads
-- every project only without FORCE; both ALTERs commit with the migration, so no other session
-- sees the table unforced. The ALTER needs the table's exclusive lock until the commit (the
-- backfill reads the partial index of FAILED runs, 0110): run writes wait meanwhile. A long
-- transaction on the table would make them wait behind the ALTER's queued lock, so the
-- migration fails after 5 s instead (lock timeout, nothing applied): run it again later.
SET LOCAL lock_timeout = '5s';
ALTER TABLE awooop_run_state NO FORCE ROW LEVEL SECURITY;
INSERT INTO awooop_dead_letters (
    project_id, run_id, run_version, source, code, reason, dead_lettered_at
)
SELECT project_id, run_id, version, 'work', failure_code, coalesce(failure_reason, ''), updated_at
FROM awooop_run_state
WHERE status = 'FAILED' AND failure_code IN ('E-RUN-004', 'E-RUN-005');
ALTER TABLE awooop_run_state FORCE ROW LEVEL SECURITY;
SET LOCAL lock_timeout = 0;
-- Tenant isolation, the producer binding and the runtime's grants; producer logins get no
-- grant (they never dead-letter anything).
SELECT awooop_enforce_tenant_isolation('awooop_dead_letters');
