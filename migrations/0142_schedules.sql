-- phase: expand
--
-- Schedules (awooop.schedules; docs/schedules.md): a project's cron schedules, each starting
-- a run of a contract with a fixed input at every fire time, through the normal intake path
-- (the run's key is `schedule:{schedule_id}:{fire time}` on the api channel, so a second
-- start of one fire time is a duplicate). The `schedules` platform loop fires them.
--
-- - next_fire_at: the schedule's next fire time not yet fired (UTC; the cron is evaluated in
--   `timezone`). A fire moves it forward by compare-and-swap in the transaction that starts
--   the run, so any number of loop replicas fire each time once.
-- - due_at: next_fire_at plus the schedule's deterministic jitter for that fire time: the
--   moment the loop may start it. awooop_schedules_due_idx holds the schedules that are not
--   paused in due order (the loop's first probe: is anything due?), and
--   awooop_schedules_project_due_idx the same per project (the loop's fair pick across
--   projects: awooop/eventlog/sql/schedule_due.sql).
-- - catch_up / catch_up_window_s: what a fire finds when the loops were down (latest, all
--   within the window, or skip); overlap: what a fire does while the schedule's previous run
--   (last_run_id) is unfinished (skip, allow, cancel_previous); jitter_s: the bound of the
--   delay.
-- - paused_at / paused_by: a paused schedule fires nothing; resuming it moves next_fire_at to
--   the first fire time after the resume.
-- - last_fire_at, last_run_id, last_outcome, fires, skipped: what the last fire did, the
--   runs started and the fire times not started (missed, overlap, refused).
--
-- A project's own rows (row-level security, like its pauses and limits). A new, empty table:
-- the previous release neither reads nor writes it.
CREATE TABLE awooop_schedules (
    schedule_id        uuid PRIMARY KEY,
    project_id         text NOT NULL,
    cron               text NOT NULL CHECK (length(cron) BETWEEN 1 AND 200),
    timezone           text NOT NULL CHECK (length(timezone) BETWEEN 1 AND 64),
    contract_id        text NOT NULL CHECK (length(contract_id) BETWEEN 1 AND 128),
    input              jsonb NOT NULL,
    catch_up           text NOT NULL CHECK (catch_up IN ('latest', 'all', 'skip')),
    catch_up_window_s  integer NOT NULL CHECK (catch_up_window_s BETWEEN 60 AND 604800),
    overlap            text NOT NULL CHECK (overlap IN ('skip', 'allow', 'cancel_previous')),
    jitter_s           integer NOT NULL DEFAULT 0 CHECK (jitter_s BETWEEN 0 AND 86400),
    next_fire_at       timestamptz NOT NULL,
    due_at             timestamptz NOT NULL CHECK (due_at >= next_fire_at),
    paused_at          timestamptz,
    paused_by          text CHECK (length(paused_by) BETWEEN 1 AND 200),
    last_fire_at       timestamptz,
    last_run_id        uuid,
    last_outcome       text CHECK (length(last_outcome) BETWEEN 1 AND 64),
    fires              bigint NOT NULL DEFAULT 0,
    skipped            bigint NOT NULL DEFAULT 0,
    created_by         text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX awooop_schedules_due_idx ON awooop_schedules (due_at) WHERE paused_at IS NULL;
CREATE INDEX awooop_schedules_project_due_idx
    ON awooop_schedules (project_id, due_at, schedule_id) WHERE paused_at IS NULL;
CREATE INDEX awooop_schedules_project_idx ON awooop_schedules (project_id, created_at);
SELECT awooop_enforce_tenant_isolation('awooop_schedules');
