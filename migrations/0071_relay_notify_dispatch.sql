-- The events' NOTIFY says whether the statement wrote an event that a worker waits for (the
-- dispatch types, awooop/core/events.py DISPATCH_EVENT_TYPES; tests/integration/test_relay_linger.py
-- holds the two lists equal). The relay publishes those at once and lets a notification of
-- other events (RunClaimed, StepCompleted, RunCompleted: read by projectors, not by workers)
-- wait up to AWOOOP_RELAY_LINGER_S, so that the events of a short run share one wake-up (at
-- 100 runs/s that was three reads and three script calls per run). The contract outbox keeps
-- its own notification (awooop_notify_relay, 0020).
CREATE FUNCTION awooop_notify_relay_events() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM inserted
        WHERE event_type IN ('RunCreated', 'ApprovalGranted', 'RunRequeued', 'LeaseReleased',
                             'RunRetried')
    ) THEN
        PERFORM pg_notify('awooop_relay', 'awooop_events:dispatch');
    ELSE
        PERFORM pg_notify('awooop_relay', 'awooop_events');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER awooop_events_notify_relay ON awooop_events;

CREATE TRIGGER awooop_events_notify_relay
    AFTER INSERT ON awooop_events
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_notify_relay_events();
