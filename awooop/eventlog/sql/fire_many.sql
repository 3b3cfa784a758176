-- batches.fire_many (awooop.runs.timers.fire_due): TimerFired on each of many runs that the
-- caller's transaction holds locked WAITING_EVENT (run_lock_wait_due.sql) at the version it
-- read ($2), as one statement: in place of a row update per run, the events' insert and the
-- waits' delete (_fire_written.sql). ``heads`` is the stream-head rule (_stream_heads.sql); a
-- run whose head refused is missing from the answer, and the caller raises (its transaction
-- rolls back). ``written`` mirrors state.apply(state, TimerFired): RESUMED, waiting_for cleared, the wait's
-- journal entry ended ("fired" for a sleep, "timeout" for an event wait:
-- awooop.eventlog.wait_state.journaled), version + 1, updated_at = the event's time (the
-- transaction's clock $6). ``closed`` removes the waits (awooop.eventlog.waits.follow,
-- waits_close.sql). WRITERS.md names the tests that hold the statement equal to apply().
WITH wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::timestamptz[])
        AS w(run_id, expected, step, kind, due_at)
), fire_at AS (
    SELECT $6::timestamptz AS at, $7::text::jsonb AS metadata
), {{fire_written}}
