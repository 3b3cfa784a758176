-- awooop: online
-- phase: expand
--
-- A worker fires and claims its own due sleeps in one statement (fire_claim.sql): each run's
-- TimerFired is followed, in that statement, by the run's RunClaimed at the next version. No
-- worker waits for such a TimerFired (the relay sends it to the events stream only:
-- streams.publish.routes_of), so its notification no longer says "dispatch": the relay lets it
-- linger with the events no worker waits for (AWOOOP_RELAY_LINGER_S), as it does a claim's. A
-- dispatch event whose run's RunClaimed does not follow it in the statement still rings the
-- relay at once. The rule is routes_of's; the anti-join keeps the check linear in the
-- statement's events.
--
-- Online: CREATE OR REPLACE FUNCTION is a catalogue change (the trigger of 0071 stays); the
-- previous release's relays read both notifications, as before.
CREATE OR REPLACE FUNCTION awooop_notify_relay_events() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM inserted AS i
        WHERE i.event_type IN ('RunCreated', 'ApprovalGranted', 'RunRequeued', 'LeaseReleased',
                               'RunRetried', 'TimerFired', 'SignalDelivered', 'ChildrenFinished')
          AND NOT EXISTS (
              SELECT 1 FROM inserted AS c
              WHERE c.stream_id = i.stream_id AND c.version = i.version + 1
                AND c.event_type = 'RunClaimed')
    ) THEN
        PERFORM pg_notify('awooop_relay', 'awooop_events:dispatch');
    ELSE
        PERFORM pg_notify('awooop_relay', 'awooop_events');
    END IF;
    RETURN NULL;
END
$$;
