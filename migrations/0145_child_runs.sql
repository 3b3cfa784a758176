-- awooop: online
-- phase: expand
--
-- Child runs (docs/workers.md, Child runs): a handler starts runs of its own project
-- (`run.start_child`) and waits for them (`run.wait_for_children`) without holding a slot.
--
-- - awooop_run_state.parent_run_id: the run that started this one (NULL: none), carried by
--   RunCreated so that a replay agrees; cancel_with_parent: whether cancelling the parent
--   cancels this run while it is unfinished. The same two columns on the projection's table.
--   Both are catalog changes without a rewrite (a nullable column, a constant default).
-- - awooop_run_state_parent_idx: a run's children in creation order (run ids are time-ordered):
--   `awooop runs show` and the console's run page list the oldest ones. Only children have
--   entries. awooop_run_state_children_unfinished_idx: a run's unfinished children: their count
--   (the bound AWOOOP_CHILDREN_PENDING_MAX, checked under the parent's row lock when a child is
--   started) and the children a cancelled parent cancels; a child leaves it when it finishes,
--   so its size is bounded by the live children. Both built CONCURRENTLY.
-- - awooop_run_waits may now hold a wait of kind 'children' (WaitStarted kind "children"):
--   `children`, the JSON array of the run ids waited for (in the handler's order), `needed`,
--   how many of them must be finished (COMPLETED, FAILED or CANCELLED) to end it, and
--   `due_at`, its timeout (NULL: none; the timers loop fires it as for an event wait). Its
--   CHECKs are dropped and added again NOT VALID (catalog only, no scan: every row already
--   satisfies the wider rules).
-- - awooop_child_cancels: a cancelled parent whose unfinished children could not all be
--   cancelled in the parent's own transaction (a child's row was locked at that moment): the
--   `timers` loop cancels the rest and deletes the row. A notification on awooop_timers
--   ('children') wakes it.
-- - ChildrenFinished (a parent's wait ended by its children) dispatches the parent: the
--   relay's notification names it with the other dispatch types (awooop/core/events.py
--   DISPATCH_EVENT_TYPES).
--
-- Expand: the previous release neither reads nor writes the columns or the table (its intake
-- writes NULL and false) and refuses a wait of kind 'children' where it reads one: start child
-- runs once every process runs this release.
ALTER TABLE awooop_run_state
    ADD COLUMN parent_run_id uuid,
    ADD COLUMN cancel_with_parent boolean NOT NULL DEFAULT false;
ALTER TABLE awooop_run_state_view
    ADD COLUMN parent_run_id uuid,
    ADD COLUMN cancel_with_parent boolean NOT NULL DEFAULT false;

CREATE INDEX CONCURRENTLY awooop_run_state_parent_idx
    ON awooop_run_state (parent_run_id, run_id)
    WHERE parent_run_id IS NOT NULL;
CREATE INDEX CONCURRENTLY awooop_run_state_children_unfinished_idx
    ON awooop_run_state (parent_run_id)
    WHERE parent_run_id IS NOT NULL AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');

ALTER TABLE awooop_run_waits
    DROP CONSTRAINT awooop_run_waits_kind_check,
    DROP CONSTRAINT awooop_run_waits_check,
    ADD COLUMN children jsonb,
    ADD COLUMN needed int;
ALTER TABLE awooop_run_waits
    ADD CONSTRAINT awooop_run_waits_kind_check
        CHECK (kind IN ('sleep', 'event', 'children')) NOT VALID,
    ADD CONSTRAINT awooop_run_waits_check
        CHECK (kind <> 'sleep' OR (due_at IS NOT NULL AND name IS NULL)) NOT VALID,
    ADD CONSTRAINT awooop_run_waits_children_check
        CHECK (kind <> 'children' OR (jsonb_typeof(children) = 'array' AND needed >= 1))
        NOT VALID;

CREATE TABLE awooop_child_cancels (
    parent_run_id  uuid PRIMARY KEY,
    project_id     text NOT NULL,
    cancelled_at   timestamptz NOT NULL DEFAULT now()
);
SELECT awooop_enforce_tenant_isolation('awooop_child_cancels');

CREATE FUNCTION awooop_notify_child_cancels() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted) THEN
        PERFORM pg_notify('awooop_timers', 'children');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER awooop_child_cancels_notify_timers
    AFTER INSERT ON awooop_child_cancels
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_notify_child_cancels();

CREATE OR REPLACE FUNCTION awooop_notify_relay_events() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM inserted
        WHERE event_type IN ('RunCreated', 'ApprovalGranted', 'RunRequeued', 'LeaseReleased',
                             'RunRetried', 'TimerFired', 'SignalDelivered', 'ChildrenFinished')
    ) THEN
        PERFORM pg_notify('awooop_relay', 'awooop_events:dispatch');
    ELSE
        PERFORM pg_notify('awooop_relay', 'awooop_events');
    END IF;
    RETURN NULL;
END
$$;
