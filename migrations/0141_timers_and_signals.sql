-- phase: expand
--
-- Durable sleep and signals (docs/workers.md, Durable sleep; Waiting for an event).
--
-- - A run may now be WAITING_EVENT: its attempt ended in `run.sleep` or `run.wait_for_event`
--   (WaitStarted, which releases the lease like ApprovalRequested); TimerFired (a sleep's due
--   time, or a wait's timeout) or SignalDelivered resumes it (RESUMED, dispatched again), and
--   RunCancelled ends it. The status CHECK of awooop_run_state and of its projection's table
--   grows by that value: dropped and added again NOT VALID (catalog only, no scan: every row
--   already satisfies the wider rule).
-- - awooop_run_waits: the open wait of each WAITING_EVENT run (at most one: the attempt ended
--   in it), written and removed in the transaction of the event that starts or ends it
--   (awooop.eventlog.waits), so no row outlives its wait. `due_at`: a sleep's due time or a
--   wait's timeout (NULL: an event wait without timeout); the partial index on it is what the
--   `timers` loop reads, earliest first, across projects. `match`: the JSON object a signal's
--   payload must contain (jsonb @>) to be delivered to the wait.
-- - awooop_signals: the signals sent to runs (the management API, the CLI, the producer
--   library), kept until delivered to a wait of their name (then `delivered_at`, `step`) or
--   their run ends. The same (run_id, signal_key) twice is one signal. `pending`: sent while
--   no wait of its run could take it at once (the producer library writes only the row): the
--   `timers` loop looks at those (a partial index) and delivers them.
-- - Notifications on channel awooop_timers wake the `timers` loop: a new wait with a due time
--   says in how many seconds it is due (the loop wakes then if that is sooner than its next
--   wake), a pending signal says "signal". The loop also polls (AWOOOP_TIMER_POLL_INTERVAL_S).
-- - TimerFired and SignalDelivered dispatch the run: the relay's notification names them with
--   the other dispatch types (awooop/core/events.py DISPATCH_EVENT_TYPES).
--
-- Expand: the previous release neither reads nor writes the tables; its processes refuse a
-- WAITING_EVENT run's row (an unknown status) where they read it, so use `run.sleep` and
-- `run.wait_for_event` once every process runs this release.
ALTER TABLE awooop_run_state DROP CONSTRAINT awooop_run_state_status_check;
ALTER TABLE awooop_run_state ADD CONSTRAINT awooop_run_state_status_check CHECK (status IN (
    'PENDING', 'RUNNING', 'WAITING_TOOL', 'WAITING_APPROVAL', 'WAITING_EVENT', 'RESUMED',
    'COMPLETED', 'FAILED', 'CANCELLED')) NOT VALID;
ALTER TABLE awooop_run_state_view DROP CONSTRAINT awooop_run_state_status_check;
ALTER TABLE awooop_run_state_view ADD CONSTRAINT awooop_run_state_status_check CHECK (status IN (
    'PENDING', 'RUNNING', 'WAITING_TOOL', 'WAITING_APPROVAL', 'WAITING_EVENT', 'RESUMED',
    'COMPLETED', 'FAILED', 'CANCELLED')) NOT VALID;

CREATE TABLE awooop_run_waits (
    run_id      uuid PRIMARY KEY,
    project_id  text NOT NULL,
    step        text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('sleep', 'event')),
    name        text,
    match       jsonb,
    due_at      timestamptz,
    started_at  timestamptz NOT NULL,
    CHECK (kind = 'event' OR (due_at IS NOT NULL AND name IS NULL))
);
CREATE INDEX awooop_run_waits_due_idx ON awooop_run_waits (due_at) WHERE due_at IS NOT NULL;
SELECT awooop_enforce_tenant_isolation('awooop_run_waits');

CREATE TABLE awooop_signals (
    signal_id     uuid PRIMARY KEY,
    project_id    text NOT NULL,
    run_id        uuid NOT NULL,
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    signal_key    text NOT NULL CHECK (length(signal_key) BETWEEN 1 AND 200),
    payload       jsonb,
    sent_by       text NOT NULL,
    sent_at       timestamptz NOT NULL DEFAULT now(),
    pending       boolean NOT NULL DEFAULT false,
    delivered_at  timestamptz,
    step          text,
    UNIQUE (run_id, signal_key)
);
CREATE INDEX awooop_signals_waiting_idx ON awooop_signals (run_id, name, sent_at)
    WHERE delivered_at IS NULL;
CREATE INDEX awooop_signals_pending_idx ON awooop_signals (sent_at) WHERE pending;
SELECT awooop_enforce_tenant_isolation('awooop_signals');
-- A producer login sends signals to its own projects' runs (row-level security) and reads
-- them back for the idempotent repeat; delivering one is the runtime's.
GRANT SELECT, INSERT ON awooop_signals TO awooop_producer;
CREATE POLICY producer_writes ON awooop_signals AS RESTRICTIVE FOR INSERT TO awooop_producer
    WITH CHECK (pending AND delivered_at IS NULL AND step IS NULL);

CREATE FUNCTION awooop_notify_timers() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    v_in float8;
BEGIN
    IF TG_TABLE_NAME = 'awooop_signals' THEN
        IF EXISTS (SELECT 1 FROM inserted WHERE pending) THEN
            PERFORM pg_notify('awooop_timers', 'signal');
        END IF;
    ELSE
        SELECT extract(epoch FROM min(due_at) - now()) INTO v_in FROM inserted;
        IF v_in IS NOT NULL THEN
            PERFORM pg_notify('awooop_timers', v_in::text);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER awooop_run_waits_notify_timers
    AFTER INSERT ON awooop_run_waits
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_notify_timers();

CREATE TRIGGER awooop_signals_notify_timers
    AFTER INSERT ON awooop_signals
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_notify_timers();

CREATE OR REPLACE FUNCTION awooop_notify_relay_events() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM inserted
        WHERE event_type IN ('RunCreated', 'ApprovalGranted', 'RunRequeued', 'LeaseReleased',
                             'RunRetried', 'TimerFired', 'SignalDelivered')
    ) THEN
        PERFORM pg_notify('awooop_relay', 'awooop_events:dispatch');
    ELSE
        PERFORM pg_notify('awooop_relay', 'awooop_events');
    END IF;
    RETURN NULL;
END
$$;
